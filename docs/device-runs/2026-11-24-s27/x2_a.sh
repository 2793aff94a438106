# For nvidia-h200-x2 (carry .dev): issue 6's third point -- two GPUs forced through the network
# path (P2P and SHM off), 128 MiB, NVIDIA NCCL's socket transport in the same call, libccl with
# the defaults (all-reduce folded on the GPU, session 28), the ring, and the two-rank exchange
# all-reduce folded on the CPU at every size (whole 128 MiB pieces);
# then P2P off alone -- NCCL's shared-memory transport against libccl's host-only cuda-ipc
# (CCL_IPC_HOST_ONLY=auto), large and small, eager and captured. Median ratios against NCCL
# printed at the end of each.
set -u; O=$OUT
OUT=/tmp/na ROUNDS=3 MEMS=device OPS="all_reduce sendrecv alltoall" RANGE="128M 128M" ARGS="-n 20 -w 3 -c 1" \
  SETS="nccl:NCCL_NET=Socket ccl: ring:CCL_GPU_FOLD_BYTES=0 xchg:CCL_GPU_FOLD_BYTES=0,CCL_ALLREDUCE_EXCHANGE_MAX_BYTES=1073741824,CCL_GPU_PIECE_BYTES=134217728" \
  bash tests/gpu/device_net_ab.sh > $O/a-net.txt 2>&1
OUT=/tmp/nb SHM=1 ROUNDS=2 MEMS=device OPS="all_reduce sendrecv all_gather broadcast alltoall reduce_scatter" \
  RANGE="8M 128M" FACTOR=16 ARGS="-n 20 -w 3 -c 1" SETS="nccl: ccl:" \
  bash tests/gpu/device_net_ab.sh > $O/a-p2p-off.txt 2>&1
# Small operations with P2P off: latency of NCCL's shared-memory kernels against host-only
# (eager, then captured into CUDA graphs), 8 B - 1 MiB.
OUT=/tmp/nc SHM=1 ROUNDS=2 MEMS=device OPS="all_reduce sendrecv all_gather" RANGE="8 1M" FACTOR=32 \
  ARGS="-n 50 -w 5 -c 1" SETS="nccl: ccl:" bash tests/gpu/device_net_ab.sh > $O/a-p2p-off-small.txt 2>&1
OUT=/tmp/nd SHM=1 ROUNDS=2 MEMS=device OPS="all_reduce sendrecv all_gather" RANGE="8 1M" FACTOR=32 \
  ARGS="-n 50 -w 5 -c 1 -G 3" SETS="nccl: ccl:" bash tests/gpu/device_net_ab.sh > $O/a-p2p-off-small-graph.txt 2>&1
tail -n 12 $O/a-net.txt; tail -n 14 $O/a-p2p-off.txt; grep -h ratio $O/a-p2p-off-small*.txt
