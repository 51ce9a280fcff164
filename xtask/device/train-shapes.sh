# The training rows that the lent GPU measures (`gpu-table.sh`) and that `cuda-check.sh` runs
# first against the stand-in driver, so that the kernel cache it packs holds every kernel
# those steps compile: sourced by both, from the repository root.
# The training shapes of issue 48's targets: bilm-tf's per-GPU batch at the `original` size, and
# the PTB configs at 256 and 512 rows (their paths absolute: the profiles run in a folder of their
# own).
original_128=(--preset original --batch-size 128 --unroll-steps 20 --vocab-size 50000
    --negatives 8192)
ptb_large_256=(--preset "$PWD/examples/configs/ptb-large.json" --batch-size 256
    --unroll-steps 35 --vocab-size 10002)
# `ptb-small.json` at 512 rows (issue 48's PTB shapes at 256-512 rows).
ptb_small_512=(--preset "$PWD/examples/configs/ptb-small.json" --batch-size 512
    --unroll-steps 35 --vocab-size 10002)
# Timed steps of a training row (after one warm-up step).
train_steps=8
# The `cuda` build's training rows: cuBLAS's products and cubek's (`-cubek`), the LSTM's
# per-step products through cuBLAS (`-blassteps`) or cubek (`-cubeksteps`) whatever the layer's
# size (by default the size picks: `KernelSettings::vendor_blas_step_min`), in f32 and mixed
# precision, and the char CNN in calls of 1,024 distinct tokens as on the host (`-chunk1024`; on
# a GPU 4,096 by default: `KernelSettings::cube_encoder_chunk_tokens`).
cuda_train_backends=cuda,cuda-mixed,cuda-cubek,cuda-mixed-cubek,cuda-blassteps,cuda-mixed-blassteps
cuda_train_backends+=,cuda-cubeksteps,cuda-mixed-cubeksteps
cuda_train_backends+=,cuda-chunk1024
