# For nvidia-h200-x2 when little device time is left (about 4 minutes; carry .dev .whl): issue 6's
# third point only (two GPUs through the network path, P2P and SHM off, 128 MiB, NVIDIA NCCL's
# socket transport in the same call; libccl's all-reduce folded on the GPU by default), two
# alternated rounds, then issue 7's tp2-sp once (30 iterations, NCCL and libccl).
set -u; O=$OUT
OUT=/tmp/na ROUNDS=2 MEMS=device OPS="all_reduce sendrecv alltoall" RANGE="128M 128M" ARGS="-n 10 -w 2 -c 1" \
  SETS="nccl:NCCL_NET=Socket ccl:" bash tests/gpu/device_net_ab.sh > $O/a-net.txt 2>&1
tail -n 12 $O/a-net.txt
ROUNDS=1 ITERS=30 CONFIGS=tp2-sp LIBS="nccl ccl" bash tests/megatron/run.sh 2>&1 | tail -n 25
