#!/usr/bin/env bash
# After the restructuring, one H200 (nvidia-h200; the two-GPU kind was not lent), the old build
# (.dev/old, commit in .dev/old/COMMIT) beside the new one (.dev/new) in the same call:
#  1. NVIDIA nccl-tests, nine ops, two ranks under mpirun sharing GPU 0: #wrong for both (the
#     two processes time-slice the GPU, so their times are not a speed figure);
#  2. ccl-perf -g 2 (two ranks in one process on GPU 0, no time slicing), nine ops, 8 B to
#     512 MiB, old and new interleaved REPS times: busbw ratios new / old (under mpirun -np 1,
#     ccl-perf puts both ranks on the one GPU). SKIP_NCCL_TESTS=1 runs the second part alone.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
export CUDA_DEVICE_MAX_CONNECTIONS=32 NCCL_NVLS_ENABLE=0
if [ -z "${SKIP_NCCL_TESTS:-}" ]; then
NCCL_TESTS_DEVICE=0 LIBS="old=.dev/old new=.dev/new" NGPU=2 bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
echo "== nccl-tests, 2 processes on one GPU"; cat "$OUT/nccltests.md" | tail -n 4; cat "$OUT/nccltests/exits.txt" | grep -v "exit 0"
fi
L=$OUT/cclperf; mkdir -p "$L"
OPS="all_reduce all_gather broadcast reduce_scatter reduce alltoall gather scatter sendrecv"
for rep in $(seq 1 "${REPS:-2}"); do
  for op in $OPS; do
    for lib in old new; do
      LD_LIBRARY_PATH=$PWD/.dev/$lib timeout -s KILL 90 mpirun --allow-run-as-root --bind-to none -np 1 \
        -x LD_LIBRARY_PATH -x CUDA_DEVICE_MAX_CONNECTIONS .dev/ccl-perf $op -b 8 -e 512M -f 4 -g 2 \
        -c 1 -n 20 -w 5 > "$L/$op.$lib.$rep.log" 2>&1 || echo "$op $lib rep $rep exit $?"
    done
  done
done
echo "== ccl-perf -g 2, one process on one GPU"
python3 tests/gpu/nccl_tests_table.py "$L" old new | tee "$OUT/cclperf.md"
cd "$OUT" && tar czf logs.tgz $(ls -d nccltests cclperf 2>/dev/null) && rm -rf nccltests cclperf
