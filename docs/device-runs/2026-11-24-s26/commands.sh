# Session 26 device calls (nvidia-h100-x1, 16 CPUs; no two-GPU machine was lent), in order; each ran in the
# repository root with .dev carried (.dev = c3ccae4's library: CCL_GPU_STREAM_P2P=1 by default). Scripts callN.sh hold the exact commands.
# 1: group_vs_lone (now with a host-memory / GPU-memory send pair) with and without CCL_GPU_STREAM_P2P; mismatched setting; sendrecv A/B; network check
bash docs/device-runs/2026-11-24-s26/call1.sh
# 2: CPU by thread, host against GPU memory, sendrecv and all_reduce 128 MiB (device_mpt_threads.sh, PROFILE=1)
bash docs/device-runs/2026-11-24-s26/call2.sh
# 3: host memory: sendrecv 64/128 MiB against all-reduce ring / one step / exchange, three rounds
bash docs/device-runs/2026-11-24-s26/call3.sh
# 4: device_net_ab.sh with an NCCL set (refused on one GPU: "Duplicate GPU detected"), libccl sendrecv 5.2-5.7 GB/s
OUT=/tmp/o ROUNDS=2 MEMS=device OPS="sendrecv" RANGE="128M 128M" ARGS="-n 10 -w 2 -c 1" SETS="nccl:NCCL_NET=Socket ccl:" TIMEOUT=60 bash tests/gpu/device_net_ab.sh
# 5-8: small GPU operations over the network path; knobs; tests/gpu/stage_latency.c alone and as two processes
bash docs/device-runs/2026-11-24-s26/call5.sh; bash docs/device-runs/2026-11-24-s26/call6.sh; bash docs/device-runs/2026-11-24-s26/call7.sh; bash docs/device-runs/2026-11-24-s26/call8.sh
# 9: frame size / frames in flight on 8-engine links
bash docs/device-runs/2026-11-24-s26/call9.sh
# 10: the one-GPU regression round: all PASS, 0 wrong
RUNS=4 bash tests/gpu/device_one_gpu.sh
# 11: the staged path over shared memory, streamed or not
bash docs/device-runs/2026-11-24-s26/call11.sh
# 12: tests/gpu/host_ring_probe.c against the staged path over shared memory
bash docs/device-runs/2026-11-24-s26/call12.sh
# 13-15: the shared-memory transport with host memory: copy helpers, pinning, non-temporal stores
bash docs/device-runs/2026-11-24-s26/call13.sh; bash docs/device-runs/2026-11-24-s26/call14.sh; bash docs/device-runs/2026-11-24-s26/call15.sh
# 16: tests/bench/shm_ring_probe.c against libccl shm broadcast / sendrecv (host memory)
bash docs/device-runs/2026-11-24-s26/call16.sh
# 17: the cuda-ipc host path carrying whole transfers (1000 permille) against the staged path over shm and default cuda-ipc
bash docs/device-runs/2026-11-24-s26/call17.sh
# 18: correctness with whole transfers through the host path: nine ops under mpirun 8 B-96 MiB, four data ops all types, one hardware queue 1-256 MiB; (its -g 2 part needed mpirun -np 1: rerun as 18b, nine ops 1-70 MB)
bash docs/device-runs/2026-11-24-s26/call18.sh
# 19: host-only cuda-ipc (CCL_IPC_HOST_ONLY=1, NCCL_P2P_DISABLE=1) against the staged path, nine ops checked, one queue, -g 2
bash docs/device-runs/2026-11-24-s26/call19.sh
# 20: the one-GPU regression round with the final library (default settings): all PASS, 0 wrong
RUNS=3 bash tests/gpu/device_one_gpu.sh
# 21: the final library (fd859a7): host-only (P2P off) and default cuda-ipc, nine ops under mpirun 8 B-128 MiB checked: 0 wrong, exit 0 everywhere
bash docs/device-runs/2026-11-24-s26/call21.sh
# 22: host-only with receive slots in shared host memory (reductions in the engine): nine ops, reductions all types x five ops, one queue, -g 2, against staged
bash docs/device-runs/2026-11-24-s26/call22.sh
# 23: the one-GPU regression round with NCCL_P2P_DISABLE=1 CCL_IPC_HOST_ONLY=1 exported (before the shared-GPU guard): all PASS but two_comms 10000 (watchdog) and "small p2p mismatch" (host-only reports the mismatch from the group call, error 5, instead of as an async error)
export NCCL_P2P_DISABLE=1 CCL_IPC_HOST_ONLY=1; RUNS=3 bash tests/gpu/device_one_gpu.sh
# 24: two_comms under host-only: 200 and 1000 iterations PASS, 3000 hit the 100 s watchdog (a hang, not slowness)
