# Session 23 device calls (nvidia-h100-x1, 16 CPUs), in order; each ran in the repository root with .dev carried.
# .dev/s22 = session 22's final build (214f7b5), .dev/new = this session's mpt change (copied frames complete on leaving,
# lazy receive announcements).
# 1: small operations over the network path (loopback, host memory), 4 ranks (1 engine per link) and 2 ranks (8 engines per link), builds alternated
export NCCL_NVLS_ENABLE=0; for r in 1 2; do for b in s22 new; do OUT=$OUT/np4.$b.$r NP=4 MAX=64K ITERS=500 SETS="socket:CCL_NET=socket mpt:CCL_NET=mpt" OPS="all_reduce broadcast all_gather reduce_scatter sendrecv" REPEAT=1 CCL=$PWD/.dev/$b bash tests/gpu/device_mpt_small.sh; done; done
for r in 1 2; do for b in s22 new; do OUT=$OUT/np2.$b.$r NP=2 MAX=1M ITERS=500 SETS="mpt:CCL_NET=mpt" OPS="all_reduce broadcast sendrecv" REPEAT=1 CCL=$PWD/.dev/$b bash tests/gpu/device_mpt_small.sh; done; done
# 2: correctness of the network path (nine ops, host and GPU memory, 8 B..32 MiB) with the new build; 128 MiB GPU-memory busbw, builds alternated
MAX=32M bash tests/gpu/device_net_check.sh
for r in 1 2 3; do for b in s22 new; do for op in all_reduce sendrecv alltoall; do LD_LIBRARY_PATH=$PWD/.dev/$b NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET .dev/ccl-perf $op -b 128M -e 128M -n 10 -w 3 -c 1 --mem device; done; done; done
