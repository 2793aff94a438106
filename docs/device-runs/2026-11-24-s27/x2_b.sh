# For nvidia-h200-x2 (carry .dev .whl): issue 7's tp2-sp against NVIDIA NCCL, the defaults and
# two push-wait settings, alternated rounds (pooled verdict by compare.py).
ROUNDS=2 ITERS=40 CONFIGS=tp2-sp LIBS="nccl ccl ccl-b ccl-c" \
  CCL_ENV_B="CCL_IPC_PUSH_WAIT_MIN_BYTES=1073741824" CCL_ENV_C="CCL_IPC_PUSH_WAIT_BUSY_US=0" \
  bash tests/megatron/run.sh 2>&1 | tail -n 40
