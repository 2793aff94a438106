#!/usr/bin/env bash
# One device call: libccl beside NVIDIA's NCCL on the GPU machine. Expects .dev/ with
# libnccl.so.2 and ccl-perf (scripts/build-lib.sh release; see docs/PERFORMANCE.md) and
# writes logs to $OUT. Usage: tests/gpu/device_run.sh [quick]
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
CCL=$PWD/.dev
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/logs"
L=$OUT/logs
nvidia-smi -L > "$L/gpus.txt" 2>&1
OPS="all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter"
SIZES=${SIZES:--b 8 -e 32M -f 8}
for lib in nccl ccl; do
  [ $lib = nccl ] && LP=$NV || LP=$CCL
  for op in $OPS; do
    echo "== $lib -g 2 $op" >> "$L/perf_g2_$lib.log"
    LD_LIBRARY_PATH=$LP timeout 120 .dev/ccl-perf $op $SIZES -n 10 -w 2 -c 1 -g 2 >> "$L/perf_g2_$lib.log" 2>&1
    echo "exit $?" >> "$L/perf_g2_$lib.log"
    echo "== $lib mpirun -np 2 $op" >> "$L/perf_mpi_$lib.log"
    LD_LIBRARY_PATH=$LP timeout 120 mpirun --allow-run-as-root -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
      .dev/ccl-perf $op $SIZES -n 10 -w 2 -c 1 >> "$L/perf_mpi_$lib.log" 2>&1
    echo "exit $?" >> "$L/perf_mpi_$lib.log"
  done
done
# All dtypes and ops at a few sizes, libccl, -g 2.
LD_LIBRARY_PATH=$CCL timeout 300 .dev/ccl-perf all_reduce -b 8 -e 1M -f 64 -d all -o all -n 2 -w 1 -g 2 > "$L/dtypes_ccl.log" 2>&1; echo "exit $?" >> "$L/dtypes_ccl.log"
# PyTorch: NCCL then libccl, compared bit for bit.
export CCL_TORCH_OUT=$OUT/torch; mkdir -p "$CCL_TORCH_OUT"
timeout 300 python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_check.py nccl > "$L/torch_nccl.log" 2>&1; echo "exit $?" >> "$L/torch_nccl.log"
LD_PRELOAD=$CCL/libnccl.so.2 timeout 300 python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_check.py ccl > "$L/torch_ccl.log" 2>&1; echo "exit $?" >> "$L/torch_ccl.log"
TORCH_NCCL_USE_COMM_NONBLOCKING=1 LD_PRELOAD=$CCL/libnccl.so.2 timeout 300 python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_check.py cclnb > "$L/torch_cclnb.log" 2>&1; echo "exit $?" >> "$L/torch_cclnb.log"
python3 tests/gpu/torch_compare.py "$CCL_TORCH_OUT" nccl ccl 2 > "$L/torch_compare.log" 2>&1
python3 tests/gpu/torch_compare.py "$CCL_TORCH_OUT" nccl cclnb 2 >> "$L/torch_compare.log" 2>&1
cd "$OUT" && tar czf logs.tgz logs && rm -rf torch
grep -h -E "Avg bus|exit|wrong|passed|failed|DIFFERS|Error|error" "$L"/*.log | sort | uniq -c | sort -rn | head -40
