#!/usr/bin/env bash
# The next nvidia-h200-x2 calls, one MODE per call (carry .dev; .dev/new = the build measured,
# .dev/old = 8269214; .whl too for MODE=megatron):
#   MODE=hostcost  host time per call (nccl-tests -C 1) beside NCCL, with libccl's phase lines
#                  (the small operations' gap is their host time: 4e964a1 asks one driver
#                  query per buffer where five were asked)
#   MODE=pack      packed lines against the flagged form, five interleaved runs, 8 B - 64 KiB,
#                  200 iterations (one run's small-size times move by up to 30%)
#   MODE=sweep     nine ops 8 B - 1 GiB beside NCCL, the table and plot for PERFORMANCE.md
#   MODE=megatron  Megatron-core tp2-sp at micro-batch 2 and 8 and pp2-1f1b beside NCCL
#   MODE=round     the two-GPU regression round (tests/gpu/device_round.sh on .dev)
set -uo pipefail
O=${OUT:-/tmp/out}
case ${MODE:-hostcost} in
  hostcost)
    OUT=$O/hc LIB=.dev/new LIBS="nccl new=.dev/new" NGPU=2 bash tests/gpu/device_host_cost.sh > /dev/null 2>&1
    grep -v "^  rank" "$O/hc/host_cost.md" | head -n 60 ;;
  pack)
    OUT=$O/pack REPS=5 OPS="all_reduce all_gather broadcast reduce reduce_scatter gather" \
      LIBS="nccl pk=.dev/new pk0=.dev/new" ENVS_pk0=CCL_IPC_LL_PACK_BYTES=0 NGPU=2 \
      EXTRA="-b 8 -e 64K -f 4 -n 200 -w 20" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    cat "$O/pack/nccltests.md"; cd "$O" && tar czf pack-logs.tgz pack && rm -rf pack/nccltests ;;
  sweep)
    OUT=$O/sweep LIBS="nccl ccl=.dev/new" NGPU=2 EXTRA="-b 8 -e 1G -f 2 -n 20 -w 5" \
      timeout ${LIMIT:-300} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    .dev/ccl-report "$O/sweep/nccltests" --base nccl --lib ccl --plot "$O/nccl-tests-x2.png" \
      --plot "$O/nccl-tests-x2.svg" > "$O/sweep.md" 2>&1
    cat "$O/sweep.md"; cd "$O" && tar czf sweep-logs.tgz sweep && rm -rf sweep ;;
  megatron)
    for mb in 2 8; do
      MICRO_BATCH=$mb LIBS="nccl ccl" CONFIGS="tp2-sp pp2-1f1b" ITERS=30 LIBCCL=$PWD/.dev/new/libnccl.so.2 \
        CCL_ENV=NCCL_DEBUG=INFO OUT=$O/mb$mb bash tests/megatron/run.sh 2>&1 | tail -n 12
    done ;;
  round) NGPU=2 bash tests/gpu/device_round.sh > /dev/null 2>&1; cat "$O/summary.md" ;;
esac
