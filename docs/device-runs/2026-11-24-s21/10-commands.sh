# nvidia-h200-x2: tp2-sp with .dev/old (2026-11-23 17:17, session 16's build) against this build and NCCL, 60 iterations
export NCCL_NVLS_ENABLE=0
LIBCCL=$PWD/.dev/old/libnccl.so.2 LIBS=ccl ITERS=60 CONFIGS=tp2-sp DEADLINE=110 bash tests/megatron/run.sh 2>&1 | grep -E "rc=0|FAIL" | sed 's/^/old: /'
LIBS="ccl nccl" ITERS=60 CONFIGS=tp2-sp DEADLINE=150 bash tests/megatron/run.sh 2>&1 | grep -E "rc=0|ratio|tp2-sp  "
