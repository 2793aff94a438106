# Session 24 device calls (nvidia-h100-x1, 16 CPUs; no two-GPU machine was lent), in order; each ran in the
# repository root with .dev carried (.dev = commit 21cde4b: the exchange all-reduce, off by default, switched by env).
# 1: two ranks over loopback (P2P/SHM off, mpt), all_reduce 128 KiB..128 MiB, host and GPU memory (both ranks on the one H100),
#    ring against exchange, and each with the streamed GPU all-reduce (8 MiB gates); two rounds
ROUNDS=2 MEMS="host device" OPS=all_reduce RANGE="128K 128M" SETS="ring:CCL_ALLREDUCE_EXCHANGE_BYTES=0 xchg:CCL_ALLREDUCE_EXCHANGE_BYTES=1 rs:CCL_ALLREDUCE_EXCHANGE_BYTES=0,CCL_GPU_STREAM_PIECE_BYTES=8388608 xs:CCL_ALLREDUCE_EXCHANGE_BYTES=1,CCL_GPU_STREAM_PIECE_BYTES=8388608" bash tests/gpu/device_net_ab.sh
# 2: the same, 512 KiB..64 MiB by factors of 2, three rounds (this call's machine moved about half what call 1's did: not used for decisions)
ROUNDS=3 MEMS="host device" OPS=all_reduce RANGE="512K 64M" FACTOR=2 SETS="ring:CCL_ALLREDUCE_EXCHANGE_BYTES=0 xchg:CCL_ALLREDUCE_EXCHANGE_BYTES=1" bash tests/gpu/device_net_ab.sh
# 3: 2, 8, 32, 128 MiB, four rounds, 20 iterations
ROUNDS=4 MEMS="host device" OPS=all_reduce RANGE="2M 128M" FACTOR=4 ARGS="-n 20 -w 3 -c 1" SETS="ring:CCL_ALLREDUCE_EXCHANGE_BYTES=0 xchg:CCL_ALLREDUCE_EXCHANGE_BYTES=1" bash tests/gpu/device_net_ab.sh
# 4: the cuda-ipc path's host time per group, two ranks on the one H100, CUDA_DEVICE_MAX_CONNECTIONS=1 (8 MiB, 500 iterations, then a perf profile of rank 0's calling thread)
OPS="all_gather reduce_scatter all_reduce" bash tests/gpu/device_ipc_host_profile.sh
# 5: .dev = commit f9e3c14 (exchange 1-16 MiB by default; ring in one step behind CCL_RING_ONE_STEP); 2 ranks: ring, ring in one step, exchange at every size; then 4 ranks (1 engine per link) ring against one step
ROUNDS=3 MEMS="host device" OPS=all_reduce RANGE="2M 128M" FACTOR=4 ARGS="-n 20 -w 3 -c 1" SETS="ring:CCL_ALLREDUCE_EXCHANGE_BYTES=0 one:CCL_ALLREDUCE_EXCHANGE_BYTES=0,CCL_RING_ONE_STEP=1 xchg:CCL_ALLREDUCE_EXCHANGE_BYTES=1,CCL_ALLREDUCE_EXCHANGE_MAX_BYTES=1073741824" bash tests/gpu/device_net_ab.sh
OUT=$OUT/np4 NP=4 ROUNDS=2 MEMS="host" OPS="all_reduce reduce_scatter all_gather" RANGE="2M 128M" FACTOR=4 ARGS="-n 10 -w 2 -c 1" SETS="ring: one:CCL_RING_ONE_STEP=1" bash tests/gpu/device_net_ab.sh
# 6: GPU staging piece size (CCL_GPU_PIECE_BYTES 32/16/8/4 MiB) at 128 MiB, two rounds, then host memory once
ROUNDS=2 MEMS="device" OPS="sendrecv alltoall all_reduce" RANGE="128M 128M" ARGS="-n 10 -w 2 -c 1" SETS="p32:CCL_GPU_PIECE_BYTES=33554432 p16:CCL_GPU_PIECE_BYTES=16777216 p8:CCL_GPU_PIECE_BYTES=8388608 p4:CCL_GPU_PIECE_BYTES=4194304" bash tests/gpu/device_net_ab.sh
ROUNDS=1 MEMS=host OPS="sendrecv alltoall all_reduce" RANGE="128M 128M" ARGS="-n 10 -w 2 -c 1" bash tests/gpu/device_net_ab.sh
# 7: two ranks of 4 engines and 2 copy threads each (CPUs to spare on 16), host memory: sendrecv, then all-reduce ring / ring in one step / exchange, 32 and 128 MiB, two rounds
for r in 1 2; do ROUNDS=1 MEMS=host OPS="sendrecv" RANGE="32M 128M" ARGS="-n 10 -w 2 -c 1" SETS="e4:CCL_MPT_ENGINES=4,CCL_COPY_THREADS=2" bash tests/gpu/device_net_ab.sh; ROUNDS=1 MEMS=host OPS="all_reduce" RANGE="32M 128M" ARGS="-n 10 -w 2 -c 1" SETS="e4ring:CCL_MPT_ENGINES=4,CCL_COPY_THREADS=2,CCL_ALLREDUCE_EXCHANGE_BYTES=0 e4one:CCL_MPT_ENGINES=4,CCL_COPY_THREADS=2,CCL_ALLREDUCE_EXCHANGE_BYTES=0,CCL_RING_ONE_STEP=1 e4xchg:CCL_MPT_ENGINES=4,CCL_COPY_THREADS=2,CCL_ALLREDUCE_EXCHANGE_MAX_BYTES=1073741824" bash tests/gpu/device_net_ab.sh; done
# 8: regression round of this session's library (commit after f9e3c14: exchange 1-16 MiB on by default): the network path's
#    correctness (nine ops, host and GPU memory, 8 B..32 MiB: all rc 0, wrong 0), then the one-GPU round (cuda-ipc path)
MAX=32M bash tests/gpu/device_net_check.sh; RUNS=4 bash tests/gpu/device_one_gpu.sh
# 9: streamed GPU all-reduce (one collective on piece gates) with 1, 2, 4 MiB pieces against off, 2-32 MiB, three rounds
ROUNDS=3 MEMS="device" OPS="all_reduce" RANGE="2M 32M" FACTOR=2 ARGS="-n 20 -w 3 -c 1" SETS="off: s1m:CCL_GPU_STREAM_PIECE_BYTES=1048576 s2m:CCL_GPU_STREAM_PIECE_BYTES=2097152 s4m:CCL_GPU_STREAM_PIECE_BYTES=4194304" bash tests/gpu/device_net_ab.sh
# 10: .dev = CCL_GPU_STREAM_PIECE_BYTES=auto (2 MiB over the network): the network path's check (nine ops, host and GPU memory, 8 B..32 MiB: rc 0, wrong 0 everywhere),
#     then auto against off at 4, 16, 64 MiB, two rounds (an all-types sweep in this call had a bad -f; rerun in call 11)
MAX=32M bash tests/gpu/device_net_check.sh; ROUNDS=2 MEMS="device" OPS="all_reduce" RANGE="4M 128M" FACTOR=4 ARGS="-n 20 -w 3 -c 1" SETS="auto: off:CCL_GPU_STREAM_PIECE_BYTES=0" bash tests/gpu/device_net_ab.sh
# 11: every type x every reduction (sum prod max min avg premulsum), GPU memory over the network path, 2.5 / 8.4 / 14.3 MB, 2 and 3 ranks, in and out of place: 216 rows each, 0 wrong
for np in 2 3; do mpirun -np $np ... .dev/ccl-perf all_reduce -b 2500000 -e 20000000 -i 5900000 -n 2 -w 1 -c 1 -d all -o all --mem device; done   # NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt
# 12: .dev = all-to-all streamed on piece gates too: alltoall int8/float/bf16/int64 2.5-67.5 MB GPU memory, 2 and 3 ranks (16 rows each, 0 wrong),
#     the network path check on GPU memory (nine ops, 0 wrong), then alltoall auto against off (CCL_GPU_STREAM_PIECE_BYTES=0), three rounds
for np in 2 3; do mpirun -np $np ... .dev/ccl-perf alltoall -b 2500000 -e 70000000 -f 3 -n 2 -w 1 -c 1 -d int8,float,bfloat16,int64 --mem device; done
MAX=32M MEMS=device bash tests/gpu/device_net_check.sh; ROUNDS=3 MEMS="device" OPS="alltoall" RANGE="4M 128M" FACTOR=4 ARGS="-n 20 -w 3 -c 1" SETS="auto: off:CCL_GPU_STREAM_PIECE_BYTES=0" bash tests/gpu/device_net_ab.sh
# 13: tests/gpu/group_vs_lone.c (new; staged path over mpt, ONE_GPU=1): a 40 MiB all-reduce and a 36 MiB-block all-to-all called alone by rank 0 and in a
#     group by rank 1. This session's final library: PASS with the defaults and with CCL_GPU_STREAM_PIECE_BYTES=0; session 22's build with streaming
#     forced on (2 MiB): FAIL, async error 5 naming both all-reduces' byte counts (streamed on one rank, cut in pieces on the other)
# 14: streamed send/receive groups (then on with the stream default; later put behind CCL_GPU_STREAM_P2P=1): sendrecv int8/float/int64 1-81 MB GPU memory,
#     2 and 3 ranks (15 rows each, 0 wrong), group_vs_lone PASS, the network path check on GPU memory 0 wrong, then sendrecv auto against off, three rounds
# 15: sendrecv 4 and 16 MiB, five rounds, 40 iterations, auto against CCL_GPU_STREAM_PIECE_BYTES=0 (inconclusive: the machine's noise, 0.9-4.7 GB/s)
ROUNDS=5 MEMS="device" OPS="sendrecv" RANGE="4M 16M" FACTOR=4 ARGS="-n 40 -w 5 -c 0" SETS="auto: off:CCL_GPU_STREAM_PIECE_BYTES=0" bash tests/gpu/device_net_ab.sh
# 16: 4 ranks, host memory, all_reduce 16-256 KiB, CCL_ONE_SHOT_BYTES 32768 / 98304 / 196608 over mpt and TCP, two rounds: within the noise
#     (the 16 and 32 KiB rows, one exchange in every set, differ by up to 50% between sets), no default changed
for r in 1 2; do NP=4 ROUNDS=1 MEMS=host OPS=all_reduce RANGE="16K 256K" FACTOR=2 ARGS="-n 300 -w 30 -c 1" SETS="m32:CCL_NET=mpt,CCL_ONE_SHOT_BYTES=32768 m96:... t192:CCL_NET=socket,CCL_ONE_SHOT_BYTES=196608" bash tests/gpu/device_net_ab.sh; done
# 17: after folding the two streamed submissions' hand-over into one (final library): network path check on GPU memory (nine ops, 0 wrong),
#     CCL_GPU_STREAM_P2P=1 sendrecv int8/float 1-27 MB (8 rows, 0 wrong), all_reduce float/int32 x sum/max 3-81 MB in and out of place (16 rows, 0 wrong),
#     group_vs_lone PASS (both passes)
