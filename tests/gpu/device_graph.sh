#!/usr/bin/env bash
# Collectives captured in CUDA graphs (PyTorch's torch.cuda.graph) and replayed, checked
# exactly (tests/gpu/torch_graph.py): NVIDIA NCCL (one rank per GPU) unless NO_NCCL=1, then
# libccl (LD_PRELOAD of $CCL/libnccl.so.2): NGPU ranks with the timing (graph replays against
# eager calls) and 64 replays queued ahead of the GPU with no synchronisation; under
# TORCH_NCCL_USE_COMM_NONBLOCKING=1; and with ONE_GPU=1 two ranks on GPU 0 (NVIDIA's NCCL
# refuses that). Prints each run's result lines and exit status; exit 1 if any run failed.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 CCL_GRAPH_HANG_S=${HANG_S:-60}
CCL=${CCL:-$PWD/.dev}; NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}; fail=0
run() { local tag=$1 np=$2; shift 2; echo "== $tag ($np ranks)"
  timeout -s KILL $((CCL_GRAPH_HANG_S + 30)) env "$@" python3 -m torch.distributed.run --nproc-per-node $np \
    tests/gpu/torch_graph.py $tag > /tmp/graph_$tag.log 2>&1; local rc=$?
  grep -E "PASS|wrong|rror|Exception|us/op|ahead|Timeout" /tmp/graph_$tag.log | grep -v "^\s*$" | head -12
  echo "exit $rc"; [ $rc = 0 ] || fail=1; }
[ "${NO_NCCL:-0}" = 1 ] || run nccl $NGPU CCL_GRAPH_TIME=1
run ccl $NGPU CCL_GRAPH_TIME=1 CCL_GRAPH_AHEAD=64 LD_PRELOAD=$CCL/libnccl.so.2 NCCL_DEBUG=WARN
run ccl_nonblocking $NGPU TORCH_NCCL_USE_COMM_NONBLOCKING=1 LD_PRELOAD=$CCL/libnccl.so.2 NCCL_DEBUG=WARN
if [ "${ONE_GPU:-0}" = 1 ]; then
  run ccl_one_gpu 2 CCL_GRAPH_ONE_GPU=1 CCL_GRAPH_TIME=1 CCL_GRAPH_AHEAD=64 LD_PRELOAD=$CCL/libnccl.so.2 NCCL_DEBUG=WARN
fi
exit $fail
