# Session 25 device calls (nvidia-h100-x1, 16 CPUs; no two-GPU machine was lent), in order; each ran in the
# repository root with .dev carried. Two ranks as processes over loopback (P2P/SHM off, CCL_NET=mpt), both on the one H100
# for GPU memory; busbw GB/s out-of-place/in-place; the "1" in front of each line is the round within one script run.
# Calls 1-2: .dev = f980a76 (session 24's last build).
# 1: send/receive 128 MiB, host memory against GPU memory in 32 MiB pieces (p32), whole, and whole on 2 / 8 MiB byte-range gates (CCL_GPU_STREAM_P2P=1), three rounds
for r in 1 2 3; do ROUNDS=1 MEMS=host OPS=sendrecv RANGE="128M 128M" ARGS="-n 20 -w 3 -c 1" bash tests/gpu/device_net_ab.sh; ROUNDS=1 MEMS=device OPS=sendrecv RANGE="128M 128M" ARGS="-n 20 -w 3 -c 1" SETS="p32:CCL_GPU_PIECE_BYTES=33554432 whole:CCL_GPU_PIECE_BYTES=134217728 s2:CCL_GPU_PIECE_BYTES=134217728,CCL_GPU_STREAM_P2P=1 s8:CCL_GPU_PIECE_BYTES=134217728,CCL_GPU_STREAM_P2P=1,CCL_GPU_STREAM_PIECE_BYTES=8388608" bash tests/gpu/device_net_ab.sh; done
# 2: the same with 4 / 8 / 16 MiB gates, and the streamed all-reduce with 2 MiB (a2, the default then) / 8 MiB (a8) pieces / one collective per 32 MiB piece (p32), three rounds
for r in 1 2 3; do ROUNDS=1 MEMS=host OPS="sendrecv all_reduce" RANGE="128M 128M" ARGS="-n 20 -w 3 -c 1" bash tests/gpu/device_net_ab.sh; ROUNDS=1 MEMS=device OPS=sendrecv RANGE="128M 128M" ARGS="-n 20 -w 3 -c 1" SETS="p32:CCL_GPU_PIECE_BYTES=33554432 s4:CCL_GPU_PIECE_BYTES=134217728,CCL_GPU_STREAM_P2P=1,CCL_GPU_STREAM_PIECE_BYTES=4194304 s8:CCL_GPU_PIECE_BYTES=134217728,CCL_GPU_STREAM_P2P=1,CCL_GPU_STREAM_PIECE_BYTES=8388608 s16:CCL_GPU_PIECE_BYTES=134217728,CCL_GPU_STREAM_P2P=1,CCL_GPU_STREAM_PIECE_BYTES=16777216" bash tests/gpu/device_net_ab.sh; ROUNDS=1 MEMS=device OPS=all_reduce RANGE="128M 128M" ARGS="-n 20 -w 3 -c 1" SETS="a2:CCL_GPU_PIECE_BYTES=33554432 a8:CCL_GPU_PIECE_BYTES=33554432,CCL_GPU_STREAM_PIECE_BYTES=8388608 p32:CCL_GPU_PIECE_BYTES=33554432,CCL_GPU_STREAM_PIECE_BYTES=0" bash tests/gpu/device_net_ab.sh; done
# Calls 3-5: .dev = stream pieces of max(2 MiB, 1/16 of the operation) by default ("auto").
# 3: auto against fixed 2 MiB (f2) and 8 MiB (f8) pieces, all_reduce and alltoall, 16-512 MiB, three rounds
ROUNDS=3 MEMS=device OPS="all_reduce alltoall" RANGE="16M 512M" FACTOR=2 ARGS="-n 20 -w 3 -c 1" SETS="auto: f2:CCL_GPU_STREAM_PIECE_BYTES=2097152 f8:CCL_GPU_STREAM_PIECE_BYTES=8388608" bash tests/gpu/device_net_ab.sh
# 4: alltoall 128-512 MiB, streamed (auto) / not streamed (off) / not cut at all (p0), GPU and host memory (round 1 kept: 4-a2a-r1.txt), then NCCL_DEBUG=INFO at 256 MiB (4-a2a-info-executor.txt)
ROUNDS=2 MEMS="device host" OPS="alltoall" RANGE="128M 512M" FACTOR=2 ARGS="-n 10 -w 2 -c 1" SETS="auto: off:CCL_GPU_STREAM_PIECE_BYTES=0 p0:CCL_GPU_STREAM_PIECE_BYTES=0,CCL_GPU_PIECE_BYTES=0" bash tests/gpu/device_net_ab.sh; ROUNDS=1 MEMS=device OPS=alltoall RANGE="256M 256M" ARGS="-n 5 -w 1 -c 1" SETS="info:NCCL_DEBUG=INFO" bash tests/gpu/device_net_ab.sh
# 5: streamed (auto) against not (off), alltoall and all_reduce, 128 and 512 MiB, four rounds
ROUNDS=4 MEMS="device" OPS="alltoall all_reduce" RANGE="128M 512M" FACTOR=4 ARGS="-n 20 -w 3 -c 1" SETS="auto: off:CCL_GPU_STREAM_PIECE_BYTES=0" bash tests/gpu/device_net_ab.sh
# 6: .dev = the streamed all-to-all's own block on the device; .dev/old = f980a76. Correctness (2 and 3 ranks, four types, 2.5-67.5 MB) then new / off / old, three rounds
bash tests/gpu/device_a2a_own_block.sh
# 7: .dev/pinned_copy (tests/bench/pinned_copy.c): CPU copies into / out of cuMemHostAlloc memory against THP and 4 KiB-page memory, 1 / 4 / 8 threads
for t in 1 4 8; do .dev/pinned_copy 256 $t; done
# 8: .dev = a trial build with CCL_MPT_ACK_COALESCE (chunks received in one engine round share one acknowledgement: 0 / per path / all); host memory 128 MiB three rounds, then 1% injected loss 64 MiB two rounds. Not kept.
ROUNDS=3 MEMS="host" OPS="sendrecv all_reduce alltoall" RANGE="128M 128M" ARGS="-n 20 -w 3 -c 1" SETS="off:CCL_MPT_ACK_COALESCE=0 path:CCL_MPT_ACK_COALESCE=path all:CCL_MPT_ACK_COALESCE=all" bash tests/gpu/device_net_ab.sh
ROUNDS=2 MEMS="host" OPS="sendrecv" RANGE="64M 64M" ARGS="-n 10 -w 2 -c 1" SETS="off1:CCL_MPT_ACK_COALESCE=0,CCL_MPT_DROP=0.01 path1:CCL_MPT_ACK_COALESCE=path,CCL_MPT_DROP=0.01 all1:CCL_MPT_ACK_COALESCE=all,CCL_MPT_DROP=0.01" bash tests/gpu/device_net_ab.sh
# 9: .dev = cf044c3; all_gather and reduce_scatter, host against GPU memory, 128 and 512 MiB, three rounds (reduce_scatter of GPU buffers ran whole: ~30% below host memory)
ROUNDS=3 MEMS="host device" OPS="all_gather reduce_scatter" RANGE="128M 512M" FACTOR=4 ARGS="-n 20 -w 3 -c 1" bash tests/gpu/device_net_ab.sh
# 10-11: .dev = the streamed reduce-scatter; call 10's correctness part had a bad -f (no rows), call 11 reran it (2 and 3 ranks, 0 wrong) with 8-64 MiB
bash tests/gpu/device_streamed.sh
RANGE="8M 64M" FACTOR=2 ROUNDS=3 bash tests/gpu/device_streamed.sh
# 12: .dev = a trial build that also streamed the all-gather (own block on the device; not kept), then the network path's check of all nine ops (8 B-32 MiB, host and GPU memory: 0 wrong everywhere)
OP=all_gather ROUNDS=3 bash tests/gpu/device_streamed.sh; MAX=32M bash tests/gpu/device_net_check.sh
# 13: .dev = gather and scatter streamed too (own block on the device at the root); every root, 2 and 3 ranks, 0 wrong; streamed against whole, two rounds
for op in scatter gather; do OP=$op ROUNDS=2 bash tests/gpu/device_streamed.sh; done
# 14: .dev = broadcast and reduce streamed too (plain reductions); every root, 2 and 3 ranks, 0 wrong; streamed against one collective per 32 MiB piece ("whole" = CCL_GPU_STREAM_PIECE_BYTES=0), two rounds
for op in broadcast reduce; do OP=$op ROUNDS=2 bash tests/gpu/device_streamed.sh; done
# 15: .dev = c0472b4 (this session's final library; .dev/old = f980a76): group_vs_lone.c (now with broadcast and reduce) against both, then the network path's check (nine ops, 8 B-32 MiB, host and GPU memory: 0 wrong)
LIBS="cur old" bash tests/gpu/device_group_vs_lone.sh
# 16: .dev = the broadcast root's own block on the device too; .dev/old = c0472b4 (streamed broadcast, root's copy on the host). Check (every root, 2 and 3 ranks: 0 wrong), then new against old, three rounds
OP=broadcast CHECK_ONLY=1 bash tests/gpu/device_streamed.sh; for r in 1 2 3; do ROUNDS=1 MEMS=device OPS=broadcast RANGE="128M 512M" ARGS="-n 20 -w 3 -c 1" SETS="new:" bash tests/gpu/device_net_ab.sh; CCL_DEV=$PWD/.dev/old ROUNDS=1 MEMS=device OPS=broadcast RANGE="128M 512M" ARGS="-n 20 -w 3 -c 1" SETS="old:" bash tests/gpu/device_net_ab.sh; done
# 17: .dev = an in-place streamed all-to-all staged apart in host memory (schedule for buffers apart); .dev/old = c0472b4. Check (2 and 3 ranks, in and out of place: 0 wrong), then new / unstreamed / old, three rounds
bash tests/gpu/device_a2a_own_block.sh
# 18: .dev = bef54b7 (this stop's final library): group_vs_lone.c PASS (4 of 4), then the network path's check (nine ops, 8 B-32 MiB, host and GPU memory: 0 wrong)
LIBS="cur" bash tests/gpu/device_group_vs_lone.sh
# 19: .dev = c5382ab; send/receive of GPU buffers, 32 MiB pieces (the default) against whole messages on 8 MiB byte-range gates, four rounds (a quiet call: s8 ahead in all 16 comparisons)
ROUNDS=4 MEMS=device OPS=sendrecv RANGE="128M 512M" FACTOR=4 ARGS="-n 20 -w 3 -c 1" SETS="p32:CCL_GPU_PIECE_BYTES=33554432 s8:CCL_GPU_PIECE_BYTES=1073741824,CCL_GPU_STREAM_P2P=1,CCL_GPU_STREAM_PIECE_BYTES=8388608" bash tests/gpu/device_net_ab.sh
