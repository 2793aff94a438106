# Device calls of 2026-11-24 (nvidia-h100-x1, 16 CPUs), in order; each ran in the repository root with .dev carried.
# .dev/s22 = the previous day's final build (214f7b5), .dev/new = the mpt change under test (copied frames complete on leaving,
# lazy receive announcements).
# 1: small operations over the network path (loopback, host memory), 4 ranks (1 engine per link) and 2 ranks (8 engines per link), builds alternated
export NCCL_NVLS_ENABLE=0; for r in 1 2; do for b in s22 new; do OUT=$OUT/np4.$b.$r NP=4 MAX=64K ITERS=500 SETS="socket:CCL_NET=socket mpt:CCL_NET=mpt" OPS="all_reduce broadcast all_gather reduce_scatter sendrecv" REPEAT=1 CCL=$PWD/.dev/$b bash tests/gpu/device_mpt_small.sh; done; done
for r in 1 2; do for b in s22 new; do OUT=$OUT/np2.$b.$r NP=2 MAX=1M ITERS=500 SETS="mpt:CCL_NET=mpt" OPS="all_reduce broadcast sendrecv" REPEAT=1 CCL=$PWD/.dev/$b bash tests/gpu/device_mpt_small.sh; done; done
# 2: correctness of the network path (nine ops, host and GPU memory, 8 B..32 MiB) with the new build; 128 MiB GPU-memory busbw, builds alternated
MAX=32M bash tests/gpu/device_net_check.sh
for r in 1 2 3; do for b in s22 new; do for op in all_reduce sendrecv alltoall; do LD_LIBRARY_PATH=$PWD/.dev/$b NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET .dev/ccl-perf $op -b 128M -e 128M -n 10 -w 3 -c 1 --mem device; done; done; done
# 3: one-exchange reduce-scatter / all-gather over mpt (.dev/os: group.rs's Multipath exclusion removed) against commit 1 (.dev/new), 4 and 8 ranks
for r in 1 2; do for b in new os; do OUT=$OUT/np4.$b.$r NP=4 MAX=32K STEP=4 ITERS=500 SETS="mpt:CCL_NET=mpt" OPS="all_gather reduce_scatter" REPEAT=1 CCL=$PWD/.dev/$b bash tests/gpu/device_mpt_small.sh; done; done
for r in 1 2; do for b in new os; do OUT=$OUT/np8.$b.$r NP=8 MAX=4K STEP=8 ITERS=300 SETS="mpt:CCL_NET=mpt" OPS="all_gather reduce_scatter" REPEAT=1 CCL=$PWD/.dev/$b bash tests/gpu/device_mpt_small.sh; done; done
# 4: (refused: working tree over 64 MiB with .dev; .dev trimmed)
# 5: .dev/cur = poll subset + held acknowledgements (commit "mpt: the acknowledgement of a whole-message chunk waits ..."), .dev/os = cur + one-exchange RS/AG over mpt
for r in 1 2; do for b in s22 cur os; do OUT=$OUT/np4.$b.$r NP=4 MAX=32K STEP=8 ITERS=500 SETS="mpt:CCL_NET=mpt" OPS="all_reduce broadcast all_gather reduce_scatter sendrecv" REPEAT=1 CCL=$PWD/.dev/$b bash tests/gpu/device_mpt_small.sh; done; done
for r in 1 2; do for b in s22 cur; do OUT=$OUT/np2.$b.$r NP=2 MAX=256K ITERS=500 SETS="mpt:CCL_NET=mpt" OPS="all_reduce broadcast sendrecv" REPEAT=1 CCL=$PWD/.dev/$b bash tests/gpu/device_mpt_small.sh; done; done
CCL=$PWD/.dev/cur bash tests/gpu/device_small_profile.sh
for r in 1 2; do for b in s22 cur; do for op in all_reduce sendrecv alltoall; do mpirun -np 2 ... .dev/ccl-perf $op -b 128M -e 128M -n 10 -w 3 -c 1 --mem device; done; done; done   # NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt
# 6: .dev/cur = HEAD with one-exchange RS/AG over mpt; 2 ranks x 8 engines 8 B..512 KiB; 128 MiB host and device memory
for r in 1 2 3; do for b in s22 cur; do OUT=$OUT/np2.$b.$r NP=2 MAX=1M ITERS=300 STEP=4 SETS="mpt:CCL_NET=mpt" OPS="sendrecv all_reduce" REPEAT=1 CCL=$PWD/.dev/$b bash tests/gpu/device_mpt_small.sh; done; done
for r in 1 2 3; do for b in s22 cur; do for mem in host device; do for op in all_reduce sendrecv; do mpirun -np 2 ... .dev/ccl-perf $op -b 128M -e 128M -n 10 -w 3 -c 1 --mem $mem; done; done; done; done
# 7: .dev/cur = HEAD with "a small frame waits for the lead engine" (lead_full)
for r in 1 2 3; do for b in s22 cur; do OUT=$OUT/np2.$b.$r NP=2 MAX=1M ITERS=300 STEP=4 SETS="mpt:CCL_NET=mpt" OPS="sendrecv all_reduce broadcast" REPEAT=1 CCL=$PWD/.dev/$b bash tests/gpu/device_mpt_small.sh; done; done
for r in 1 2; do for b in s22 cur; do OUT=$OUT/np4.$b.$r NP=4 MAX=128K STEP=8 ITERS=300 SETS="mpt:CCL_NET=mpt sock:CCL_NET=socket" OPS="all_reduce all_gather reduce_scatter" REPEAT=1 CCL=$PWD/.dev/$b bash tests/gpu/device_mpt_small.sh; done; done
# 8: one-GPU regression round on the final library (lead_full commit), cuda-ipc path: RUNS=6 bash tests/gpu/device_one_gpu.sh (gpu_backend_test not carried)
# 9: MAX=32M bash tests/gpu/device_net_check.sh (final library); NET=socket CCL=$PWD/.dev/cur bash tests/gpu/device_small_profile.sh (TCP, 4 ranks, 8 B all_reduce)
# 10 (nvidia-h200-x2): ENGINES=auto PIECES=33554432 STREAMS="0 8388608" HOSTMEM=1 bash tests/gpu/device_net.sh; then OUT=$OUT/r2 ENGINES=auto PIECES=33554432 STREAMS="0 8388608 0 8388608" OPS=all_reduce bash tests/gpu/device_net.sh
# 11 (nvidia-h200-x2): ROUNDS=3 ITERS=40 CONFIGS=tp2-sp LIBS="nccl ccl" bash tests/megatron/run.sh   (carry .dev .whl)
# 12 (nvidia-h200-x2): ROUNDS=2 ITERS=40 CONFIGS=tp2-sp LIBS="nccl ccl ccl-b" LIBCCL_B=$PWD/.dev/s12/libnccl.so.2 bash tests/megatron/run.sh   (carry .dev .whl)
# 13 (nvidia-h200-x2): ROUNDS=1 ITERS=40 CONFIGS=tp2-sp LIBS="nccl ccl" CCL_ENV="NCCL_DEBUG=INFO" bash tests/megatron/run.sh
# 14 (nvidia-h200-x2): ROUNDS=1 ITERS=40 CONFIGS=tp2-sp LIBS="nccl ccl ccl-b ccl-c" CCL_ENV_B="CCL_IPC_PUSH_WAIT_BUSY_US=0" CCL_ENV_C="CCL_IPC_PUSH_WAIT_US=0 CCL_IPC_PUSH_WAIT_BUSY_US=0" bash tests/megatron/run.sh
# 15 (nvidia-h200-x2): ROUNDS=1 ITERS=30 CONFIGS="tp2-sp pp2-1f1b" LIBS="nccl ccl ccl-b" CCL_ENV_B="CCL_IPC_PUSH_WAIT_US=0 CCL_IPC_PUSH_WAIT_BUSY_US=0" bash tests/megatron/run.sh
