"""The peer of `elmo embed`'s and `elmo merge`'s HDF5 writer: h5py writing AllenNLP's `elmo` layout.

`write SRC DST`: every dataset of SRC (an `elmo embed` output) written to DST as AllenNLP's
`elmo` command writes its output (allennlp/commands/elmo.py: `create_dataset(str(i), ...)` per
line, then `sentence_to_index` as a one-element variable-length string), timed apart from the
reading of SRC. `lookup FILE [N]`: N datasets (2,000 by default) of FILE opened by name, in a
fixed random order, and read. Prints one JSON line with the seconds.
"""

import json
import random
import sys
import time

import h5py


def write(src, dst):
    with h5py.File(src, "r") as f:
        names = [n for n in f.keys() if n != "sentence_to_index"]
        values = {n: f[n][()] for n in names}
        index = f["sentence_to_index"][0] if "sentence_to_index" in f else None
    started = time.perf_counter()
    with h5py.File(dst, "w") as out:
        for name in names:
            out.create_dataset(name, values[name].shape, dtype="float32", data=values[name])
        if index is not None:
            dataset = out.create_dataset(
                "sentence_to_index", (1,), dtype=h5py.special_dtype(vlen=str)
            )
            dataset[0] = index
    seconds = time.perf_counter() - started
    print(json.dumps({"write_s": round(seconds, 3), "datasets": len(names),
                      "h5py": h5py.version.version, "hdf5": h5py.version.hdf5_version}))


def lookup(path, n):
    with h5py.File(path, "r") as f:
        names = sorted(n for n in f.keys() if n != "sentence_to_index")
    random.Random(0).shuffle(names)
    names = names[:n]
    started = time.perf_counter()
    with h5py.File(path, "r") as f:
        total = 0
        for name in names:
            total += f[name][()].size
    seconds = time.perf_counter() - started
    print(json.dumps({"lookup_s": round(seconds, 3), "lookups": len(names), "values": total}))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == "lookup":
        lookup(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2000)
    else:
        sys.exit(__doc__)
