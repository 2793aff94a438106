# Session 27 (2026-11-24, from 18:42 UTC): every device call, all on nvidia-h100-x1 (no two-GPU
# machine was lent). Each ran from the repository root with .dev carried (libnccl.so.2 and
# ccl-perf from that commit's `scripts/build-lib.sh release`).
# 1: host-only on by default (CCL_IPC_HOST_ONLY=auto): the one-GPU round with NCCL_P2P_DISABLE=1; which path each setting takes
bash docs/device-runs/2026-11-24-s27/call1.sh
# 2: host-only for 3 and 4 ranks (through the slots) and for 2 with CCL_IPC_DIRECT=0; mismatch.c fixed
bash docs/device-runs/2026-11-24-s27/call2.sh
# 3: the fallback to host-only when peers cannot be mapped (CCL_IPC_FAULT_NO_PEER_ACCESS=1); the round with the defaults
bash docs/device-runs/2026-11-24-s27/call3.sh
# 4: torch_check.py on one GPU: host-only and staged bitwise equal to the mapped path
bash docs/device-runs/2026-11-24-s27/call4.sh
# 5: host-only reductions staged into a GPU mirror (CCL_IPC_HOST_ONLY_STAGE_IN 1 vs 0), every type x reduction
bash docs/device-runs/2026-11-24-s27/call5.sh
# 6: the network path, GPU against host memory, with and without the exchange all-reduce (6-net-host-vs-device.txt)
OUT=/tmp/na ROUNDS=2 MEMS="host device" OPS="sendrecv all_reduce" RANGE="128M 128M" ARGS="-n 20 -w 3 -c 1" SETS="ccl: xchg:CCL_ALLREDUCE_EXCHANGE_MAX_BYTES=1073741824,CCL_GPU_PIECE_BYTES=134217728" bash tests/gpu/device_net_ab.sh
# 7: all-reduces captured into CUDA graphs host-only, against the staged captured path; torch_graph.py
bash docs/device-runs/2026-11-24-s27/call7.sh
# 8: reduce-scatters, all-gathers and broadcasts captured host-only
bash docs/device-runs/2026-11-24-s27/call8.sh
# 9: every collective captured host-only
bash docs/device-runs/2026-11-24-s27/call9.sh
# 10: sends and receives captured host-only
bash docs/device-runs/2026-11-24-s27/call10.sh
# 11: the one-GPU regression round with P2P off after every change of the session (host-only eager and captured)
export NCCL_P2P_DISABLE=1; OUT=/tmp/o RUNS=3 bash tests/gpu/device_one_gpu.sh  # summary: 11-round-p2p-off-summary.md
# 12: captured sends/receives host-only after every rank handshakes with every other: 2-4 ranks, torch_graph.py 3 processes
bash docs/device-runs/2026-11-24-s27/call12.sh
# 13: captured all-reduces, broadcasts and reduces over 32 MiB in rounds
bash docs/device-runs/2026-11-24-s27/call13.sh
# 14: after the review clean-up (one CCL_IPC_HOST_ONLY parse, rounds carrying their offsets): call13.sh again (same
# figures, 0 wrong), captured sendrecv -G 3 for 2 and 3 ranks (0 wrong), and the no-peer-access fallback still taken
bash docs/device-runs/2026-11-24-s27/call13.sh
# Ready for nvidia-h200-x2 (not lent this session): x2_a.sh (issue 6's network path against NCCL's socket transport; P2P off against NCCL's shared memory, large and small, eager and captured), x2_b.sh (issue 7 tp2-sp).
