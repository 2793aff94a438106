#!/usr/bin/env bash
# Regression checks of 2cef872 (point-to-point kernel up to 32 KiB, low-latency all-reduce up
# to 4 MiB with two ranks) on nvidia-h200-x2 (carry .dev = that build): the size-mismatch and
# abort tests, two communicators in one group, nccl-tests-style checked sweeps of the affected
# ops as one process and under mpirun, then PyTorch beside NVIDIA NCCL, bit for bit.
set -uo pipefail
# LIBDIR (.dev): the build checked. P2P=BYTES: every check with CCL_IPC_P2P_KERNEL_BYTES=BYTES.
[ -n "${P2P:-}" ] && export CCL_IPC_P2P_KERNEL_BYTES=$P2P
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NGPU=2
CCL=$PWD/${LIBDIR:-.dev}; OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"; S=$OUT/summary.md; : > "$S"
say() { echo "$*" | tee -a "$S"; }
cc() { gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include "tests/gpu/$1.c" -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -lpthread -o "/tmp/$1" >> "$L/build.log" 2>&1; }
cc mismatch && timeout -s KILL 60 /tmp/mismatch 2>&1 | tail -n 3 | tee -a "$S"
cc abort_recovers && for v in "X=1" "ABORT_COUNT=16384" "ABORT_OP=all_gather ABORT_COUNT=4096"; do
  echo "$v:" | tee -a "$S"; env $v timeout -s KILL 60 /tmp/abort_recovers 2>&1 | grep -a abort_recovers | tee -a "$S"
done
mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/group_comm_order.c -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -o /tmp/group_comm_order >> "$L/build.log" 2>&1 && timeout -s KILL 90 mpirun --allow-run-as-root \
  --bind-to none -np 2 -x CCL_IPC_DISABLE=0 /tmp/group_comm_order 2>&1 | grep -E "PASS|FAIL" | head -n 3 | tee -a "$S"
CHECK_ARGS='-b 8 -e 8M -f 2 -n 2 -w 1 -c 1' CHECK_TIMEOUT=60 CHECK_MODES="g2 mpi" \
  bash tests/gpu/device_check.sh sendrecv all_reduce reduce reduce_scatter alltoall | tee -a "$S"
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export CCL_TORCH_OUT=$OUT/torch; mkdir -p "$CCL_TORCH_OUT"
timeout -s KILL 100 python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch_check.py nccl > "$L/torch_nccl.log" 2>&1; say "torch nccl exit $?"
TORCH_NCCL_USE_COMM_NONBLOCKING=1 LD_PRELOAD=$CCL/libnccl.so.2 timeout -s KILL 120 python3 -m torch.distributed.run \
  --nproc-per-node 2 tests/gpu/torch_check.py ccl > "$L/torch_ccl.log" 2>&1; say "torch ccl exit $?"
python3 tests/gpu/torch_compare.py "$CCL_TORCH_OUT" nccl ccl 2 2>&1 | tail -n 3 | tee -a "$S"
cd "$OUT" && tar czf check-logs.tgz logs && rm -rf logs torch
