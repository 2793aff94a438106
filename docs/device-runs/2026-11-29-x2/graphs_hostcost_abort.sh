#!/usr/bin/env bash
# nvidia-h200-x2, one call: nccl-tests nine ops with -G 5 (CUDA graphs) beside NVIDIA NCCL;
# host time per call (-C 1) beside NCCL; abort with a dead peer on two GPUs (abort_recovers.c,
# three ranks over two GPUs, and PyTorch's in-process recovery, tests/gpu/torch_abort.py).
# Carry .dev (.dev/new = the build measured).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}
OUT=$O/g5 LIBS="nccl new=.dev/new" NGPU=2 EXTRA="-G 5" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
echo "## -G 5"; cat $O/g5/nccltests.md
OUT=$O/hc LIB=.dev/new LIBS="nccl new=.dev/new" NGPU=2 bash tests/gpu/device_host_cost.sh > /dev/null 2>&1
echo "## -C 1"; grep -v "^  rank" $O/hc/host_cost.md | head -n 40
CCL=$PWD/.dev/new
gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/abort_recovers.c -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -o /tmp/abort_recovers && for v in "ABORT_X=1" "ABORT_COUNT=16384" "ABORT_OP=all_gather ABORT_COUNT=4096"; do
  echo "abort_recovers $v:"; env $v timeout -s KILL 60 /tmp/abort_recovers 2>&1 | grep -a abort_recovers; done
mkdir -p $O/abort
CCL_TORCH_ABORT_DEADLINE_S=45 TORCH_NCCL_ASYNC_ERROR_HANDLING=2 NCCL_DEBUG=INFO LD_PRELOAD=$CCL/libnccl.so.2 \
  timeout -s KILL 100 python3 -m torch.distributed.run --nproc-per-node 3 tests/gpu/torch_abort.py > $O/abort/torch_abort.log 2>&1
echo "torch_abort exit $?"; grep -aE "PASS|FAIL|released" $O/abort/torch_abort.log | head
cd $O && tar czf logs.tgz g5 hc abort && rm -rf g5/nccltests hc/ab-* abort
