#!/usr/bin/env bash
# The 4-GPU measurements (nvidia-h200-x4), one PART per device call (each fits the 600 s a call
# may run; everything under $OUT; LIB, default .dev/new, holds libccl's libnccl.so.2):
#   PART=main    the copy-engine ceiling of all-gather / all-to-all with no library
#                (tests/gpu/ce_ceiling_n.c); NVIDIA's nccl-tests nine ops (8 B - 512 MiB, x4)
#                beside NVIDIA NCCL and beside "lanes" (the same library with
#                CCL_IPC_BATCH_COPIES=0: a copy lane per peer instead of one driver batch per
#                rank), ratio table, verdict and plot by ccl-report; NCCL's own copy-engine
#                collectives (nccl-tests -R 2 -x 2) for all-gather and all-to-all; batches
#                without own blocks over 2 MiB (CCL_IPC_BATCH_LOCAL_MAX_BYTES) against the default
#   PART=sweep   issue 41's criterion: nine ops 8 B - 1 GiB (x2) beside NCCL, verdict and plot
#   PART=ll      the low-latency all-reduce in one and two shots and up to 2 MiB, eager, then
#                six ops 8 B - 4 MiB in CUDA graphs (-G 10) in one and two shots
#   PART=graphs  nine ops captured (-G 5, 8 B - 1 GiB) beside NCCL, ccl-report's graph verdict
#                (the captured copies pushed on a copy lane per partner)
#   PART=windows symmetric windows (nccl-tests -R 2 -x 2): the six data-moving ops 8 B - 1 GiB,
#                libccl pushing through the windows against plain registrations
#                (CCL_IPC_SYMMETRIC_WINDOWS=0) and NVIDIA's copy-engine collectives
#   PART=writeall SM stores over NVLink against copy engines with no library
#                (tests/gpu/store_vs_ce.cu), then direct all-reduces whose kernel writes the
#                slice into every output (CCL_IPC_DIRECT_REDUCE_WRITE_ALL=1) against copy-engine
#                pushes and NCCL,
#                2 MiB - 1 GiB, then host time per call (-C 1) at 16 and 128 MiB
#   PART=mailed  direct all-reduces and reduce-scatters that wait for nobody
#                (CCL_IPC_DIRECT_REDUCE_MAILED=1) against the default and NCCL, 2 MiB - 1 GiB,
#                then host time per call (-C 1) at 16 and 128 MiB
#   PART=knobs   the thresholds that rest on one-GPU or two-GPU runs, each against the default
#                on the ops it moves, 64 KiB - 64 MiB beside NCCL: the exchange kernel to 2 MiB
#                per rank (CCL_IPC_LL_EXCHANGE_BYTES; 512 KiB by default with more than two
#                ranks) for all_gather, alltoall, broadcast; broadcasts relayed from 1 MiB
#                (CCL_IPC_BCAST_RELAY_BYTES; 8 MiB by default); reductions on the kernel to
#                4 MiB (CCL_IPC_LL_BYTES; 1 MiB by default) for all_reduce, reduce_scatter
# Order when the machine is lent: main, sweep, then windows, writeall, mailed, knobs, ll, graphs.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LIB=${LIB:-.dev/new}; NGPU=${NGPU:-4}
# report DIR BASE NAME [ccl-report flags]: NAME against BASE in DIR's logs into DIR.md.
report() {
  local dir=$1 base=$2 name=$3; shift 3
  [ -x .dev/ccl-report ] || { cat "$OUT/$dir/nccltests.md"; return; }
  .dev/ccl-report "$OUT/$dir/nccltests" --base "$base" --lib "$name" "$@" > "$OUT/$dir-$name.md" 2>&1
  cat "$OUT/$dir-$name.md"
}
pack() { (cd "$OUT" && tar czf "$1-logs.tgz" "$1" && rm -rf "$1"); }
case ${PART:-main} in
  main)
    gcc -O2 tests/gpu/ce_ceiling_n.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 \
      -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o /tmp/ce_ceiling_n \
      && timeout -s KILL 150 /tmp/ce_ceiling_n $((1 << 30)) ${CEIL_ITERS:-5} | tee "$OUT/ceiling.txt"
    OUT=$OUT/ab LIBS="nccl ccl=$LIB lanes=$LIB" ENVS_lanes=CCL_IPC_BATCH_COPIES=0 NGPU=$NGPU \
      timeout "${LIMIT:-300}" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    report ab nccl ccl --verdict --plot "$OUT/nccl-tests-x4.png" --plot "$OUT/nccl-tests-x4.svg" \
      --caption "libccl / NCCL, nccl-tests on $NGPU GPUs"
    report ab ccl lanes
    # Own blocks over 2 MiB out of the batch, as two ranks do by default (on two H200s an own
    # block ran slower in a batch than beside the push on a lane of its own, 2026-11-30).
    OUT=$OUT/loc OPS="all_gather alltoall gather" EXTRA="-b 1M -e 512M -f 4" LIBS="ccl=$LIB local2=$LIB" \
      ENVS_local2=CCL_IPC_BATCH_LOCAL_MAX_BYTES=2097152 NGPU=$NGPU timeout 100 \
      bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    report loc ccl local2
    OUT=$OUT/ce OPS="all_gather alltoall" EXTRA="-R 2 -x 2 -b 64M -e 1G -f 4" LIBS="nccl" NGPU=$NGPU \
      timeout 100 bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    grep -haE "^ +[0-9]{8,}" "$OUT"/ce/nccltests/*.log | head -20
    pack ab; pack ce; pack loc ;;
  sweep)
    OUT=$OUT/sweep LIBS="nccl ccl=$LIB" NGPU=$NGPU EXTRA="-b 8 -e 1G -f 2 -n 20 -w 5" \
      timeout "${LIMIT:-540}" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    report sweep nccl ccl --verdict --plot "$OUT/nccl-tests-x4.png" --plot "$OUT/nccl-tests-x4.svg" \
      --caption "libccl / NCCL, nccl-tests on $NGPU GPUs"
    pack sweep ;;
  ll)
    # The low-latency all-reduce's crossovers on more than two GPUs: one shot (the default)
    # against two shots from 16 KiB, and the kernel taking all-reduces up to 2 MiB.
    OUT=$OUT/ll OPS="all_reduce" EXTRA="-b 8 -e 8M -f 2 -n 50 -w 10" LIBS="nccl one=$LIB two=$LIB two2m=$LIB" \
      ENVS_two=CCL_IPC_LL_TWO_SHOT_BYTES=16384 \
      ENVS_two2m="CCL_IPC_LL_TWO_SHOT_BYTES=16384 CCL_IPC_LL_BYTES=2097152" NGPU=$NGPU \
      timeout 240 bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    cat "$OUT/ll/nccltests.md"
    # The same in CUDA graphs (the GPU's time alone), six ops 8 B - 4 MiB.
    OUT=$OUT/graph OPS="all_reduce all_gather reduce_scatter alltoall broadcast reduce" \
      EXTRA="-b 8 -e 4M -f 4 -n 50 -w 10 -G 10" LIBS="nccl one=$LIB two=$LIB" \
      ENVS_two=CCL_IPC_LL_TWO_SHOT_BYTES=16384 NGPU=$NGPU timeout 280 \
      bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    cat "$OUT/graph/nccltests.md"
    pack ll; pack graph ;;
  graphs)
    OUT=$OUT/graphs LIBS="nccl ccl=$LIB" NGPU=$NGPU EXTRA="-b 8 -e 1G -f 2 -n 20 -w 5 -G 5" \
      timeout "${LIMIT:-500}" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    report graphs nccl ccl --verdict --graphs --plot "$OUT/graphs-x4.png"
    pack graphs ;;
  windows)
    OUT=$OUT/win OPS="all_gather alltoall broadcast gather scatter sendrecv" LIBS="nccl ccl=$LIB nowin=$LIB" \
      ENVS_nowin=CCL_IPC_SYMMETRIC_WINDOWS=0 EXTRA="-R 2 -x 2 -b 8 -e 1G -f 4 -n 20 -w 5" NGPU=$NGPU \
      timeout "${LIMIT:-500}" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    report win nccl ccl --verdict
    report win nowin ccl
    pack win ;;
  writeall)
    nvcc -O2 -arch=sm_90 -o /tmp/store_vs_ce tests/gpu/store_vs_ce.cu \
      && timeout -s KILL 120 /tmp/store_vs_ce $((1 << 30)) 5 | tee "$OUT/store_vs_ce.txt"
    OUT=$OUT/wa OPS="all_reduce" LIBS="nccl wa=$LIB push=$LIB" ENVS_wa=CCL_IPC_DIRECT_REDUCE_WRITE_ALL=1 \
      EXTRA="-b 2M -e 1G -f 2 -n 20 -w 5" NGPU=$NGPU timeout 300 bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    report wa nccl wa
    report wa nccl push
    report wa push wa
    OUT=$OUT/wah OPS="all_reduce" LIBS="nccl wa=$LIB push=$LIB" ENVS_wa=CCL_IPC_DIRECT_REDUCE_WRITE_ALL=1 \
      EXTRA="-C 1 -b 16M -e 128M -f 8 -n 200 -w 20" NGPU=$NGPU timeout 200 bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    report wah nccl wa --verdict --host
    report wah nccl push --verdict --host
    pack wa; pack wah ;;
  mailed)
    OUT=$OUT/ml OPS="all_reduce reduce_scatter" LIBS="nccl mail=$LIB plain=$LIB" ENVS_mail=CCL_IPC_DIRECT_REDUCE_MAILED=1 \
      EXTRA="-b 2M -e 1G -f 2 -n 20 -w 5" NGPU=$NGPU timeout 300 bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    report ml nccl mail
    report ml plain mail
    OUT=$OUT/mlh OPS="all_reduce reduce_scatter" LIBS="nccl mail=$LIB plain=$LIB" ENVS_mail=CCL_IPC_DIRECT_REDUCE_MAILED=1 \
      EXTRA="-C 1 -b 16M -e 128M -f 8 -n 200 -w 20" NGPU=$NGPU timeout 200 bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    report mlh nccl mail --verdict --host
    report mlh plain mail --verdict --host
    pack ml; pack mlh ;;
  knobs)
    OUT=$OUT/kx OPS="all_gather alltoall broadcast" LIBS="nccl ccl=$LIB ex2m=$LIB" \
      ENVS_ex2m=CCL_IPC_LL_EXCHANGE_BYTES=2097152 EXTRA="-b 64K -e 64M -f 2 -n 20 -w 5" NGPU=$NGPU \
      timeout 200 bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    report kx ccl ex2m
    report kx nccl ccl
    OUT=$OUT/kb OPS="broadcast" LIBS="nccl ccl=$LIB relay1m=$LIB" ENVS_relay1m=CCL_IPC_BCAST_RELAY_BYTES=1048576 \
      EXTRA="-b 256K -e 64M -f 2 -n 20 -w 5" NGPU=$NGPU timeout 120 bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    report kb ccl relay1m
    OUT=$OUT/kr OPS="all_reduce reduce_scatter" LIBS="nccl ccl=$LIB ll4m=$LIB" ENVS_ll4m=CCL_IPC_LL_BYTES=4194304 \
      EXTRA="-b 256K -e 16M -f 2 -n 20 -w 5" NGPU=$NGPU timeout 150 bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    report kr ccl ll4m
    report kr nccl ccl
    pack kx; pack kb; pack kr ;;
  *) echo "PART: main, sweep, ll, graphs, windows, writeall or knobs" >&2; exit 2 ;;
esac
