#!/usr/bin/env bash
# nvidia-h200-x2, one call: the point-to-point kernel's slot at 64 KiB (.dev/p2p64) against
# 4 KiB (.dev/auto) and NVIDIA NCCL: nccl-tests sendrecv 8 B - 1 MiB eager and captured (-G 5),
# then the PyTorch check (bitwise against NCCL). Carry .dev.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}
OUT=$O/eager OPS=sendrecv LIBS="nccl auto=.dev/auto p2p64=.dev/p2p64" NGPU=2 EXTRA="-b 8 -e 1M -f 2" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
OUT=$O/graph OPS=sendrecv LIBS="nccl p2p64=.dev/p2p64" NGPU=2 EXTRA="-b 8 -e 1M -f 4 -G 5" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
{ for n in auto p2p64; do echo "## eager: $n against nccl"; .dev/ccl-report $O/eager/nccltests --base nccl --lib $n; done
  echo "## -G 5: p2p64 against nccl"; .dev/ccl-report $O/graph/nccltests --base nccl --lib p2p64
  grep -h "#wrong" $O/eager/nccltests.md $O/graph/nccltests.md; } > $O/p2p64.md 2>&1
L=$O/torch; mkdir -p $L; export CCL_TORCH_OUT=/tmp/torch; mkdir -p $CCL_TORCH_OUT
timeout -s KILL 150 python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_check.py nccl > $L/torch_nccl.log 2>&1; echo "torch nccl exit $?" >> $O/p2p64.md
TORCH_NCCL_USE_COMM_NONBLOCKING=1 LD_PRELOAD=$PWD/.dev/p2p64/libnccl.so.2 timeout -s KILL 150 python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_check.py ccl > $L/torch_ccl.log 2>&1; echo "torch p2p64 exit $?" >> $O/p2p64.md
python3 tests/gpu/torch_compare.py $CCL_TORCH_OUT nccl ccl 2 2>&1 | tail -n 2 >> $O/p2p64.md
cd $O && tar czf logs.tgz eager graph torch && rm -rf eager/nccltests graph/nccltests torch
