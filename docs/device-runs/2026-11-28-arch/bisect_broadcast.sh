#!/usr/bin/env bash
# Which step of the restructuring moved the 2-rank broadcast on one H200 (ccl-perf -g 2 under
# mpirun -np 1): old (before), mid (the copy-engine engine moved into p2p/, 7d0de1c), mid2
# (p2p's lib.rs split, 3174b9a), new; REPS interleaved runs each.
set -uo pipefail
OUT=${OUT:-/tmp/out}; L=$OUT/bisect; mkdir -p "$L"
export CUDA_DEVICE_MAX_CONNECTIONS=32
for rep in 1 2; do for op in ${OPS:-broadcast all_gather}; do for lib in old mid mid2 new; do
  LD_LIBRARY_PATH=$PWD/.dev/$lib timeout -s KILL 90 mpirun --allow-run-as-root --bind-to none -np 1 \
    -x LD_LIBRARY_PATH -x CUDA_DEVICE_MAX_CONNECTIONS .dev/ccl-perf $op -b 8 -e 32M -f 4 -g 2 -c 1 \
    -n 20 -w 5 > "$L/$op.$lib.$rep.log" 2>&1 || echo "$op $lib $rep exit $?"
done; done; done
python3 - "$L" ${OPS:-broadcast all_gather} <<'PY'
import sys, os
d, ops = sys.argv[1], sys.argv[2:]
libs = ["old", "mid", "mid2", "new"]
for op in ops:
    print(f"== {op}: out-of-place us, rep 1 then rep 2, per lib " + " ".join(libs))
    rows = {}
    for r in (1, 2):
        for lib in libs:
            try:
                for line in open(os.path.join(d, f"{op}.{lib}.{r}.log")):
                    t = line.split()
                    if len(t) > 8 and t[0].isdigit():
                        rows.setdefault(int(t[0]), []).append(t[5])
            except OSError:
                pass
    for size in sorted(rows):
        print(size, " ".join(rows[size]))
PY
cd "$OUT" && tar czf bisect.tgz bisect && rm -rf bisect
