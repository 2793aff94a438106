#!/usr/bin/env bash
# The 4-GPU measurements in one device call (nvidia-h200-x4): the copy-engine ceiling of
# all-gather / all-to-all with no library (tests/gpu/ce_ceiling_n.c), NVIDIA's nccl-tests nine
# ops beside NVIDIA NCCL (ratio table and plot by ccl-report when cargo is here, else the
# logs), and NCCL's own copy-engine collectives (nccl-tests -R 2 -x 2) for all-gather and
# all-to-all; then the low-latency all-reduce in one and two shots, eager and in CUDA graphs. LIB (default .dev/new) holds libccl's libnccl.so.2; "lanes" is the same library
# with CCL_IPC_BATCH_COPIES=0 (a copy lane per peer instead of one driver batch per rank).
# Everything under $OUT. PART=graphs instead runs the nine ops captured (-G 5, 8 B - 1 GiB)
# beside NCCL with ccl-report's verdict (a call of its own: issue 41's graph criterion, and the
# captured copies pushed on a copy lane per partner).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LIB=${LIB:-.dev/new}; NGPU=${NGPU:-4}
if [ "${PART:-all}" = graphs ]; then
  OUT=$OUT/graphs LIBS="nccl ccl=$LIB" NGPU=$NGPU EXTRA="-b 8 -e 1G -f 2 -n 20 -w 5 -G 5" \
    timeout "${LIMIT:-500}" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
  .dev/ccl-report "$OUT/graphs/nccltests" --base nccl --lib ccl --verdict --graphs \
    --plot "$OUT/graphs-x4.png" > "$OUT/graphs-x4.md" 2>&1
  cat "$OUT/graphs-x4.md"; cd "$OUT" && tar czf graphs-x4-logs.tgz graphs && rm -rf graphs
  exit 0
fi
gcc -O2 tests/gpu/ce_ceiling_n.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 \
  -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o /tmp/ce_ceiling_n \
  && timeout -s KILL 150 /tmp/ce_ceiling_n $((1 << 30)) ${CEIL_ITERS:-5} | tee "$OUT/ceiling.txt"
OUT=$OUT/ab LIBS="nccl ccl=$LIB lanes=$LIB" ENVS_lanes=CCL_IPC_BATCH_COPIES=0 NGPU=$NGPU \
  bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
cat "$OUT/ab/nccltests.md"
[ -x .dev/ccl-report ] && .dev/ccl-report "$OUT/ab/nccltests" --base nccl --lib ccl --verdict \
  --plot "$OUT/nccl-tests-x4.png" --plot "$OUT/nccl-tests-x4.svg" \
  --caption "libccl / NCCL, nccl-tests on $NGPU GPUs" > "$OUT/ab-report.md" 2>&1 && cat "$OUT/ab-report.md"
OUT=$OUT/ce OPS="all_gather alltoall" EXTRA="-R 2 -x 2 -b 64M -e 1G -f 4" LIBS="nccl" NGPU=$NGPU \
  bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
grep -haE "^ +[0-9]{8,}" "$OUT"/ce/nccltests/*.log | head -20
# The low-latency all-reduce's crossovers on more than two GPUs: one shot (the default) against
# two shots from 16 KiB, and the kernel taking all-reduces up to 2 MiB (CCL_IPC_LL_BYTES).
OUT=$OUT/ll OPS="all_reduce" EXTRA="-b 8 -e 8M -f 2 -n 50 -w 10" LIBS="nccl one=$LIB two=$LIB two2m=$LIB" \
  ENVS_two=CCL_IPC_LL_TWO_SHOT_BYTES=16384 \
  ENVS_two2m="CCL_IPC_LL_TWO_SHOT_BYTES=16384 CCL_IPC_LL_BYTES=2097152" NGPU=$NGPU \
  bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
cat "$OUT/ll/nccltests.md"
# The same in CUDA graphs (the GPU's time alone; small collectives captured as the
# low-latency kernels), six ops 8 B - 4 MiB.
OUT=$OUT/graph OPS="all_reduce all_gather reduce_scatter alltoall broadcast reduce" \
  EXTRA="-b 8 -e 4M -f 4 -n 50 -w 10 -G 10" LIBS="nccl one=$LIB two=$LIB" \
  ENVS_two=CCL_IPC_LL_TWO_SHOT_BYTES=16384 NGPU=$NGPU bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
cat "$OUT/graph/nccltests.md"
cd "$OUT" && tar czf x4-logs.tgz ab ce ll graph ceiling.txt && rm -rf ab/nccltests ce/nccltests ll/nccltests graph/nccltests
