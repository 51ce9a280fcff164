#!/usr/bin/env bash
# `elmo embed`'s and `elmo merge`'s HDF5 writer against the peer, h5py writing AllenNLP's `elmo`
# layout (xtask/peer/hdf5_output_h5py.py), on this machine in one run. The demo model (embedded
# in the binary), `--layers top`, short lines: 5-15 words of a 5,000-word list (seed 0), the
# first N lines for each N of $LINES. Per N: `elmo embed` (seconds, peak RSS), OLD_ELMO's embed
# when given (cut at $OLD_LIMIT s), `elmo merge` of that output into a new file (and OLD_ELMO's
# merge of the same output, cut at $OLD_LIMIT s), h5py writing
# the same datasets, and 2,000 lookups by name through h5py in `elmo`'s output and in h5py's.
#
#   bash xtask/peer/hdf5_output_bench.sh target/debug/elmo [OLD_ELMO]
#   LINES="20000 80000 300000 1000000" OLD_LIMIT=300 bash xtask/peer/hdf5_output_bench.sh ...
set -euo pipefail
elmo=$(realpath "$1")
old=${2:+$(realpath "$2")}
lines=${LINES:-20000 80000 300000}
old_limit=${OLD_LIMIT:-300}
peer=$(realpath "$(dirname "$0")/hdf5_output_h5py.py")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"

max=0
for n in $lines; do ((n > max)) && max=$n; done
python3 - "$max" >corpus.txt <<'EOF'
import random, string, sys
rng = random.Random(0)
words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
         for _ in range(5000)]
out = sys.stdout
for _ in range(int(sys.argv[1])):
    out.write(" ".join(rng.choice(words) for _ in range(rng.randint(5, 15))) + "\n")
EOF

# Seconds and peak RSS (MiB) of a command, or "> LIMIT s" past LIMIT.
timed() {
    local limit=$1
    shift
    if timeout "$limit" /usr/bin/time -f "%e %M" -o time.txt "$@" >/dev/null 2>err.txt; then
        awk '{ printf "%s s, %.0f MiB", $1, $2 / 1024 }' time.txt
    else
        echo "> $limit s"
    fi
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs"
echo "h5py: $(python3 -c 'import h5py; print(h5py.version.version, "/ HDF5", h5py.version.hdf5_version)')"
echo
echo "| lines | elmo embed | old elmo embed | elmo merge | old elmo merge | h5py write (peer) | h5py 2,000 lookups: elmo's / h5py's file |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for n in $lines; do
    head -n "$n" corpus.txt >in.txt
    rm -f new.hdf5 old.hdf5 merged.hdf5 peer.hdf5
    embed=$(timed 3600 "$elmo" embed -q --layers top in.txt new.hdf5)
    old_embed="-"
    if [[ -n $old && -n ${old_over:-} ]]; then
        old_embed="$old_over"
    elif [[ -n $old ]]; then
        old_embed=$(timed "$old_limit" "$old" embed -q --layers top in.txt old.hdf5)
        rm -f old.hdf5 .old.hdf5.* old.hdf5.lock
        # Past its limit here, past it at every larger N too.
        [[ $old_embed == ">"* ]] && old_over="(> $old_limit s at fewer lines)"
    fi
    merge=$(timed 3600 "$elmo" merge -q merged.hdf5 new.hdf5)
    old_merge="-"
    if [[ -n $old ]]; then
        old_merge=$(timed "$old_limit" "$old" merge -q old-merged.hdf5 new.hdf5)
        rm -f old-merged.hdf5
    fi
    write=$(python3 "$peer" write new.hdf5 peer.hdf5 | python3 -c 'import json,sys; print(json.load(sys.stdin)["write_s"], "s")')
    ours=$(python3 "$peer" lookup new.hdf5 2000 | python3 -c 'import json,sys; print(json.load(sys.stdin)["lookup_s"], "s")')
    theirs=$(python3 "$peer" lookup peer.hdf5 2000 | python3 -c 'import json,sys; print(json.load(sys.stdin)["lookup_s"], "s")')
    echo "| $n | $embed | $old_embed | $merge | $old_merge | $write | $ours / $theirs |"
done
