#!/usr/bin/env bash
# Collectives captured in CUDA graphs (PyTorch's torch.cuda.graph) and replayed, checked
# exactly: tests/gpu/torch_graph.py with NVIDIA NCCL (one rank per GPU) and with libccl
# (LD_PRELOAD of $CCL/libnccl.so.2), NGPU ranks; ONE_GPU=1 also runs libccl with two ranks
# on GPU 0 (NVIDIA's NCCL refuses that). Prints each run's last lines and exit status.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
CCL=${CCL:-$PWD/.dev}; NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}
run() { local tag=$1; shift; echo "== $tag"; timeout -s KILL 180 "$@" python3 -m torch.distributed.run \
  --nproc-per-node ${NPROC:-$NGPU} tests/gpu/torch_graph.py $tag > /tmp/graph_$tag.log 2>&1; local rc=$?
  grep -E "PASS|wrong|rror|Exception" /tmp/graph_$tag.log | grep -v "^\s*$" | head -${LINES_:-12}; echo "exit $rc"; }
run nccl env
run ccl env LD_PRELOAD=$CCL/libnccl.so.2 NCCL_DEBUG=${DEBUG:-WARN}
if [ "${ONE_GPU:-0}" = 1 ]; then
  NPROC=2 run ccl_one_gpu env CCL_GRAPH_ONE_GPU=1 LD_PRELOAD=$CCL/libnccl.so.2 NCCL_DEBUG=${DEBUG:-WARN}
fi
