//! Tuning of the CPU matrix product behind burn's flex backend (the `gemm` crate) for the shapes of
//! ELMo's recurrences.

/// Makes the `gemm` crate pack the weight operand of small-batch matrix products.
///
/// By default `gemm` reads the left operand in place when the other side is narrow, which is the
/// case of every LSTM step (`[B, P] x [P, 4C]` with B = 64): the weights are then walked with a
/// power-of-two stride (64 KiB for `original`), and the cache conflicts halve the throughput.
/// Packing them first costs one copy per product and was measured faster on every ELMo shape
/// (2 vCPUs, `cargo run -p elmo-cli --example bench_matmul`): `[64x512]x[512x16384]` 27 → 36
/// GFLOP/s, `elmo embed` on the `original` shape 1.3x. Results are unchanged (same products,
/// same summation order; the parity tests run with it).
///
/// The setting is global to the process (it is `gemm`'s own), so it is an application's choice:
/// the `elmo` CLI makes it for the flex backend. It has no effect on other backends.
pub fn pack_small_batch_weights() {
    gemm_common::gemm::set_lhs_packing_threshold_single_thread(1);
    gemm_common::gemm::set_lhs_packing_threshold_multi_thread(1);
}
