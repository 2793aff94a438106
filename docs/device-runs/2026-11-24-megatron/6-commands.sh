# nvidia-h200-x2, carry .dev .whl: Megatron, all three configurations, 100 iterations
export NCCL_NVLS_ENABLE=0
ITERS=100 DEADLINE=570 bash tests/megatron/run.sh 2>&1 | tail -n 60
tar czf $OUT/megatron.tgz -C $OUT megatron 2>/dev/null; rm -rf $OUT/megatron
