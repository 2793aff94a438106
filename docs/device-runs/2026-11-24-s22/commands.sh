# Session 22 device calls (nvidia-h100-x1, 16 CPUs), in order; each ran in the repository root with .dev carried.
# 1 (code 56808e3): where a 128 MiB network-path operation's time goes, host vs GPU memory, 32 MiB pieces vs whole
for mem in host device; do for op in sendrecv all_reduce; do OP=$op MEM=$mem SETS="p32:CCL_GPU_PIECE_BYTES=33554432 whole:CCL_GPU_PIECE_BYTES=0" REPEAT=2 ITERS=40 bash tests/gpu/device_mpt_variance.sh; done; done
MEMS="host device" OPS="all_reduce sendrecv" bash tests/gpu/device_net_profile.sh
# 2 (code 90e070a + NP knob): one-exchange all-reduce, 4 ranks; host vs GPU memory with 4 or 8 engines
NP=4 OPS=all_reduce MAX=32K STEP=4 REPEAT=2 ITERS=500 SETS="sock-ring:CCL_NET=socket,CCL_ALLREDUCE_ONE_SHOT_BYTES=0 sock-1x:CCL_NET=socket mpt-ring:CCL_NET=mpt,CCL_ALLREDUCE_ONE_SHOT_BYTES=0 mpt-1x:CCL_NET=mpt" bash tests/gpu/device_mpt_small.sh
for mem in host device; do for op in sendrecv all_reduce; do OUT=$OUT/$mem OP=$op MEM=$mem SETS="e4c2:CCL_MPT_ENGINES=4,CCL_COPY_THREADS=2 e8c4:CCL_MPT_ENGINES=8,CCL_COPY_THREADS=4" REPEAT=3 ITERS=40 bash tests/gpu/device_mpt_variance.sh; done; done
# 3 (code with the streamed all-reduce, 8 MiB default then): correctness and A/B
mpirun -np 2 ... .dev/ccl-perf all_reduce -b 12M -e 48M -f 2 -n 2 -w 1 -c 1 -d all -o all   # NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt, GPU memory
OP=all_reduce MEM=device SETS="seq:CCL_GPU_STREAM_PIECE_BYTES=0 s8:CCL_GPU_STREAM_PIECE_BYTES=8388608 s2:CCL_GPU_STREAM_PIECE_BYTES=2097152" REPEAT=3 ITERS=40 bash tests/gpu/device_mpt_variance.sh
bash tests/gpu/device_net_check.sh
# 4 (one-shot for reduce-scatter, reduce, all-gather, broadcast too): 4 and 8 ranks over the network path
NP=4 OPS="reduce_scatter all_gather reduce broadcast all_reduce" MAX=32K STEP=4 REPEAT=2 ITERS=500 SETS="sock-ring:CCL_NET=socket,CCL_ONE_SHOT_BYTES=0 sock-1x:CCL_NET=socket mpt-ring:CCL_NET=mpt,CCL_ONE_SHOT_BYTES=0 mpt-1x:CCL_NET=mpt" bash tests/gpu/device_mpt_small.sh
NP=8 OPS="all_reduce all_gather" MAX=2K STEP=16 REPEAT=2 ITERS=300 SETS="sock-ring:CCL_NET=socket,CCL_ONE_SHOT_BYTES=0 sock-1x:CCL_NET=socket" bash tests/gpu/device_mpt_small.sh
# 5: shared memory, 4 and 8 ranks; TCP 8 ranks reduce-scatter, 6 ranks all-reduce
for np in 4 8; do SHM_DISABLE=0 NP=$np OPS="all_reduce all_gather reduce_scatter" MAX=8K STEP=4 REPEAT=2 ITERS=1000 SETS="shm-ring:CCL_ONE_SHOT_BYTES=0 shm-1x:CCL_ONE_SHOT_RANKS=8" bash tests/gpu/device_mpt_small.sh; done
NP=8 OPS="reduce_scatter" MAX=2K STEP=16 REPEAT=2 ITERS=300 SETS="sock-ring:CCL_NET=socket,CCL_ONE_SHOT_BYTES=0 sock-1x:CCL_NET=socket" bash tests/gpu/device_mpt_small.sh
NP=6 OPS="all_reduce" MAX=2K STEP=16 REPEAT=2 ITERS=300 SETS="sock-ring:CCL_NET=socket,CCL_ONE_SHOT_BYTES=0 sock-1x:CCL_NET=socket,CCL_ONE_SHOT_RANKS=8" bash tests/gpu/device_mpt_small.sh
# 6 (code 9c... hand_over refactor): NOTE the first line's export leaked NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt
# into device_one_gpu.sh, so that round ran the staged network path (mismatch.c's checks are for the
# cuda-ipc path and fail there by design: it reads the async errors without waiting).
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt
CCL_GPU_STREAM_PIECE_BYTES=8388608 mpirun -np 2 ... .dev/ccl-perf all_reduce -b 12M -e 48M -f 2 -n 2 -w 1 -c 1 -d all -o sum,max
bash tests/gpu/device_net_check.sh
bash tests/gpu/device_one_gpu.sh
# 7: two_comms.c (one GPU, 200 iterations), network path (mpt / socket), session-start build (.dev/base) vs this one, 12 runs each
# 8: two_comms.c, this build, 30 runs over mpt and 30 on the default (cuda-ipc) path
# 9: streamed all-reduce with fewer engines (4 engines, 2 copy threads per rank) at 128 MiB, and the defaults at 512 MiB
OUT=$OUT/a OP=all_reduce MEM=device SETS="seq:CCL_GPU_STREAM_PIECE_BYTES=0,CCL_MPT_ENGINES=4,CCL_COPY_THREADS=2 s8:CCL_GPU_STREAM_PIECE_BYTES=8388608,CCL_MPT_ENGINES=4,CCL_COPY_THREADS=2" REPEAT=4 ITERS=40 bash tests/gpu/device_mpt_variance.sh
OUT=$OUT/b OP=all_reduce MEM=device SIZE=512M SETS="seq:CCL_GPU_STREAM_PIECE_BYTES=0 s8:CCL_GPU_STREAM_PIECE_BYTES=8388608" REPEAT=2 ITERS=15 bash tests/gpu/device_mpt_variance.sh
# 10: cpu-clock profile of rank 0's main thread (perf carried in .dev/perf), 4 ranks over mpt, reduce_scatter 1 KiB, ring vs one exchange
for os in 0 32768; do CCL_NET=mpt NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 CCL_ONE_SHOT_BYTES=$os mpirun -np 4 ... .dev/ccl-perf reduce_scatter -b 1024 -e 1024 -n 100000 -w 10 -c 0 --mem host &
  sleep 6; perf record -e cpu-clock -F 2000 -g -t <rank 0 main thread> -- sleep 2; perf record -p <rank 0> -- sleep 2; done
# 11: two_comms.c one GPU 200 iterations, this build (with the NCCL_ALGO rule), 40 runs over mpt and 40 on cuda-ipc: 0 failed
# 12: one-exchange collectives on the staged GPU path: 4 ranks on the one GPU, GPU memory, TCP and mpt, every type and reduction, 8 B..64 KiB
for net in socket mpt; do for op in all_reduce reduce_scatter all_gather; do CCL_NET=$net NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 mpirun -np 4 ... .dev/ccl-perf $op -b 8 -e 64K -f 8 -n 3 -w 1 -c 1 -d all -o all; done; done
# 13: where one exchange stops paying: 4 ranks, TCP (all_reduce, reduce_scatter, all_gather) and mpt (all_reduce), 8 KiB..256 KiB, ring vs one exchange forced (CCL_ONE_SHOT_BYTES=8388608)
NP=4 OPS="all_reduce reduce_scatter all_gather" MAX=256K STEP=2 REPEAT=2 ITERS=300 SETS="sock-ring:CCL_NET=socket,CCL_ONE_SHOT_BYTES=0 sock-1x:CCL_NET=socket,CCL_ONE_SHOT_BYTES=8388608" bash tests/gpu/device_mpt_small.sh
NP=4 OPS="all_reduce" MAX=256K STEP=2 REPEAT=2 ITERS=300 SETS="mpt-ring:CCL_NET=mpt,CCL_ONE_SHOT_BYTES=0 mpt-1x:CCL_NET=mpt,CCL_ONE_SHOT_BYTES=8388608" bash tests/gpu/device_mpt_small.sh
# 14 (final code, 09d5d6a's library): bash tests/gpu/device_one_gpu.sh on the default (cuda-ipc) path
