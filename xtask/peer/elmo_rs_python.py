"""The `elmo_rs` Python module timed as `xtask/peer/elmo_pytorch.py` times its peer: batches of
15-25-token sentences (64 by default, random words, so the token cache has nothing to reuse),
stateless, every layer handed back as NumPy arrays, one untimed batch first.

    python3 xtask/peer/elmo_rs_python.py MODEL_DIR THREADS [BATCHES] [BATCH_SIZE] [CLASS]

CLASS: `ElmoEmbedder` (the default: `embed_batch`, every layer) or `Elmo` (AllenNLP's module:
`elmo(batch_to_ids(batch))`, one scalar mix of the layers and its mask).

MODEL_DIR holds `options.json` and `weights.hdf5` (e.g. `elmo export` of an `original`-shaped
run). THREADS sets RAYON_NUM_THREADS before the module loads. Prints `RESULT ... tokens_per_s=...
peak_rss_mib=...` as the peer does.
"""
import os
import random
import resource
import string
import sys
import time

model_dir = sys.argv[1]
threads = int(sys.argv[2])
batches = int(sys.argv[3]) if len(sys.argv) > 3 else 3
batch_size = int(sys.argv[4]) if len(sys.argv) > 4 else 64
which = sys.argv[5] if len(sys.argv) > 5 else "ElmoEmbedder"
if which not in ("ElmoEmbedder", "Elmo"):
    sys.exit(f"CLASS must be ElmoEmbedder or Elmo, not {which!r}")
os.environ["RAYON_NUM_THREADS"] = str(threads)

import elmo_rs  # noqa: E402  (after the thread count is set)

rng = random.Random(0)


def sentence():
    return ["".join(rng.choices(string.ascii_letters, k=rng.randint(2, 12))) for _ in range(rng.randint(15, 25))]


data = [[sentence() for _ in range(batch_size)] for _ in range(batches + 1)]
files = (os.path.join(model_dir, "options.json"), os.path.join(model_dir, "weights.hdf5"))
if which == "Elmo":
    elmo = elmo_rs.Elmo(*files, 1, dropout=0.0, token_cache_mib=0)

    def run(batch):
        out = elmo(elmo_rs.batch_to_ids(batch))
        assert out["mask"].shape[0] == len(batch)

else:
    elmo = elmo_rs.ElmoEmbedder(*files, batch_size=batch_size, token_cache_mib=0)

    def run(batch):
        vectors = elmo.embed_batch(batch)
        assert vectors[0].shape[0] == elmo.n_layers

run(data[0])
start = time.perf_counter()
for batch in data[1:]:
    run(batch)
seconds = time.perf_counter() - start
tokens = sum(len(s) for batch in data[1:] for s in batch)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(
    f"RESULT elmo_rs python {which} threads={threads} batch={batch_size} tokens={tokens} "
    f"seconds={seconds:.3f} tokens_per_s={tokens / seconds:.1f} peak_rss_mib={rss:.0f}"
)
