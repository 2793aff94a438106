#!/usr/bin/env bash
# A short device call: libccl's GPU path (-g 2 and mpirun), then PyTorch on NCCL and on
# libccl compared bit for bit. Logs to $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"
for op in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter; do
  echo "== $op" >> "$L/g2_ccl.log"
  LD_LIBRARY_PATH=$CCL timeout 25 .dev/ccl-perf $op -b 8 -e 4M -f 8 -n 5 -w 1 -c 1 -g 2 >> "$L/g2_ccl.log" 2>&1; echo "exit $?" >> "$L/g2_ccl.log"
done
LD_LIBRARY_PATH=$CCL timeout 40 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH .dev/ccl-perf all_reduce -b 8 -e 4M -f 8 -n 5 -w 1 > "$L/mpi_ccl.log" 2>&1; echo "exit $?" >> "$L/mpi_ccl.log"
export CCL_TORCH_OUT=$OUT/torch; mkdir -p "$CCL_TORCH_OUT"
timeout 100 python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_check.py nccl > "$L/torch_nccl.log" 2>&1; echo "exit $?" >> "$L/torch_nccl.log"
LD_PRELOAD=$CCL/libnccl.so.2 timeout 120 python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_check.py ccl > "$L/torch_ccl.log" 2>&1; echo "exit $?" >> "$L/torch_ccl.log"
python3 tests/gpu/torch_compare.py "$CCL_TORCH_OUT" nccl ccl 2 > "$L/torch_compare.log" 2>&1
rm -rf "$CCL_TORCH_OUT"
grep -h -E "^==|exit|Avg bus|passed|DIFFERS|ncclGetVersion|done:" "$L"/*.log | head -60
