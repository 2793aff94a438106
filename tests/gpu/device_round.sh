#!/usr/bin/env bash
# One compact device call after a change to the GPU path: stream-order stress (two_comms.c),
# a correctness sweep of the nine ops (-g N, and mpirun for seven), PyTorch with non-blocking
# init compared with NVIDIA NCCL (bit for bit with 2 ranks; sums within tolerance with more,
# see torch_compare.py), then busbw/latency beside NCCL. Everything under $OUT; summary.md at
# the end (libccl measured with direct transfers on and off). Env: NGPU (N, default 2),
# PERF_OPS, PERF_SIZES, MPI_PERF_OPS, QUICK=1 (the checks and PyTorch only). two_comms.c,
# peer_dies.c, mismatch.c, reuse.c and inplace_small.c are two-GPU / two-rank tests by design
# and use GPUs 0 and 1 whatever NGPU is; abort_recovers.c runs three ranks over the GPUs there
# are.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"
S=$OUT/summary.md; : > "$S"
export NGPU=${NGPU:-2}
TX=$((30 * (NGPU - 2)))  # more time for PyTorch with more ranks (0 with 2)
say() { echo "$*" | tee -a "$S"; }

gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/two_comms.c -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -lpthread -o /tmp/two_comms > "$L/two_comms.build.log" 2>&1 || say "two_comms: build failed"
[ -x /tmp/two_comms ] && { TWO_COMMS_TIMEOUT_S=60 timeout -s KILL 70 /tmp/two_comms 10000 > "$L/two_comms.log" 2>&1; echo "exit $?" >> "$L/two_comms.log"; grep -E "PASS|FAIL|SKIP|exit" "$L/two_comms.log" | tee -a "$S"; }

gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/peer_dies.c -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -o /tmp/peer_dies >> "$L/two_comms.build.log" 2>&1 && timeout -s KILL 60 /tmp/peer_dies 2>&1 | tail -n 3 | tee -a "$S"
gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/abort_recovers.c -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -o /tmp/abort_recovers >> "$L/two_comms.build.log" 2>&1 && timeout -s KILL 60 /tmp/abort_recovers 2>&1 | grep -a abort_recovers | tee -a "$S"
# The same with the pending operation on the low-latency kernels, which spin on the GPU: an
# all-reduce of 64 KiB and an all-gather of 16 KiB per rank; then ncclCommRevoke and a shrink
# instead of the abort, on copy engines and on the kernel.
for v in "ABORT_COUNT=16384" "ABORT_OP=all_gather ABORT_COUNT=4096" "REVOKE=1" \
  "REVOKE=1 ABORT_COUNT=16384"; do
  echo "$v:" | tee -a "$S"; env $v timeout -s KILL 60 /tmp/abort_recovers 2>&1 | grep -a abort_recovers | tee -a "$S"
done
gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/mismatch.c -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -o /tmp/mismatch >> "$L/two_comms.build.log" 2>&1 && timeout -s KILL 60 /tmp/mismatch 2>&1 | tail -n 3 | tee -a "$S"
mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/reuse.c -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -o /tmp/reuse >> "$L/two_comms.build.log" 2>&1 && NCCL_DEBUG=INFO timeout -s KILL 90 \
  mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_DEBUG /tmp/reuse > "$L/reuse.log" 2>&1  # 2 ranks by design
grep -E "PASS|FAIL" "$L/reuse.log" | tee -a "$S"; grep -h "straight between user buffers" "$L/reuse.log" | sed 's/.*rank/reuse: rank/' | tee -a "$S"
# The same with ncclMemAlloc returning VMM memory (shared by file descriptor).
[ -x /tmp/reuse ] && NCCL_CUMEM_ENABLE=1 NCCL_DEBUG=INFO timeout -s KILL 90 mpirun --allow-run-as-root --bind-to none \
  -np 2 -x NCCL_DEBUG -x NCCL_CUMEM_ENABLE /tmp/reuse > "$L/reuse_vmm.log" 2>&1
grep -E "PASS|FAIL" "$L/reuse_vmm.log" | sed 's/^/NCCL_CUMEM_ENABLE=1 /' | tee -a "$S"
grep -h "straight between user buffers\|no CUDA VMM\|take file descriptor" "$L/reuse_vmm.log" | sed 's/.*rank/reuse vmm: rank/' | head -n 4 | tee -a "$S"
# Small sends past the point-to-point kernel's slots received in place (snapshots, holds).
mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/inplace_small.c -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -o /tmp/inplace_small >> "$L/two_comms.build.log" 2>&1 && timeout -s KILL 60 \
  mpirun --allow-run-as-root --bind-to none -np 2 /tmp/inplace_small > "$L/inplace_small.log" 2>&1
echo "inplace_small exit $?" >> "$L/inplace_small.log"
grep -E "PASS|FAIL|exit" "$L/inplace_small.log" | tee -a "$S"
# Two communicators in one group on one stream, their handles in opposite orders on the two
# ranks, on cuda-ipc and staged; staged against a rank calling them one by one.
mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/group_comm_order.c -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -o /tmp/group_comm_order >> "$L/two_comms.build.log" 2>&1 && for x in "CCL_IPC_DISABLE=0" \
    "CCL_IPC_DISABLE=1" "CCL_IPC_DISABLE=1 -x GROUP_ORDER_MIXED=1"; do
  timeout -s KILL 90 mpirun --allow-run-as-root --bind-to none -np 2 -x $x /tmp/group_comm_order 2>&1 \
    | grep -E "PASS|FAIL" | head -n 3 | sed "s/^/$x: /" | tee -a "$S"; done
CHECK_ARGS='-b 8 -e 128M -f 128 -n 2 -w 1 -c 1' CHECK_TIMEOUT=40 CHECK_MODES=g$NGPU bash tests/gpu/device_check.sh | tee -a "$S"
CHECK_ARGS='-b 8 -e 128M -f 128 -n 2 -w 1 -c 1' CHECK_TIMEOUT=40 CHECK_MODES=mpi bash tests/gpu/device_check.sh all_reduce alltoall sendrecv | tee -a "$S"
CHECK_ARGS='-b 8 -e 128M -f 128 -n 2 -w 1 -c 1' CHECK_TIMEOUT=40 CHECK_MODES=mpi bash tests/gpu/device_check.sh all_gather broadcast gather scatter | tee -a "$S"
CCL_IPC_DIRECT=0 CHECK_ARGS='-b 8 -e 128M -f 128 -n 2 -w 1 -c 1' CHECK_TIMEOUT=40 CHECK_MODES=g$NGPU bash tests/gpu/device_check.sh sendrecv alltoall all_gather | sed 's/^check/check staged/' | tee -a "$S"
CHECK_ARGS='-b 8 -e 1M -f 16 -n 2 -w 1 -c 1 -d all -o sum,max' CHECK_TIMEOUT=90 CHECK_MODES=g$NGPU bash tests/gpu/device_check.sh all_reduce | sed 's/^check/check all-types/' | tee -a "$S"

NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
# QUICK=1: the checks and PyTorch only (no speed rows, no graph part).
[ "${QUICK:-0}" = 1 ] && PERF_OPS=" " MPI_PERF_OPS=" "  # a blank list: no rows
python3 tests/gpu/perf_rows.py --header op,size NCCL,libccl,CCL_IPC_DIRECT=0 | tee -a "$S"
for op in ${PERF_OPS:-all_reduce reduce_scatter all_gather alltoall broadcast sendrecv gather scatter}; do
  for size in ${PERF_SIZES:-8 1M 128M 512M}; do
    for lib in nccl ccl staged; do
      [ $lib = nccl ] && LP=$NV || LP=$CCL
      [ $lib = staged ] && DIRECT=0 || DIRECT=1
      CCL_IPC_DIRECT=$DIRECT LD_LIBRARY_PATH=$LP timeout -s KILL 40 .dev/ccl-perf $op -b $size -e $size -n 20 -w 5 -c 0 -g $NGPU \
        > "$L/perf.$op.$size.$lib.log" 2>&1
    done
    python3 tests/gpu/perf_rows.py "$op,$size" "$L/perf.$op.$size".{nccl,ccl,staged}.log | tee -a "$S"
  done
done
# One process per GPU (as under torchrun), where either rank may be the one that copies.
python3 tests/gpu/perf_rows.py --header "mpirun op,size" NCCL,libccl | tee -a "$S"
for op in ${MPI_PERF_OPS:-sendrecv alltoall all_gather all_reduce}; do
  for size in 8 512M; do
    for lib in nccl ccl; do
      [ $lib = nccl ] && LP=$NV || LP=$CCL
      LD_LIBRARY_PATH=$LP timeout -s KILL 40 mpirun --allow-run-as-root --bind-to none -np $NGPU \
        -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE .dev/ccl-perf $op -b $size -e $size -n 20 -w 5 -c 0 \
        > "$L/mpiperf.$op.$size.$lib.log" 2>&1
    done
    python3 tests/gpu/perf_rows.py "$op,$size" "$L/mpiperf.$op.$size".{nccl,ccl}.log | tee -a "$S"
  done
done
export CCL_TORCH_OUT=$OUT/torch; mkdir -p "$CCL_TORCH_OUT"
timeout -s KILL $((100 + TX)) python3 -m torch.distributed.run --nproc-per-node $NGPU tests/gpu/torch_check.py nccl > "$L/torch_nccl.log" 2>&1; say "torch nccl exit $?"
TORCH_NCCL_USE_COMM_NONBLOCKING=1 LD_PRELOAD=$CCL/libnccl.so.2 timeout -s KILL $((120 + TX)) python3 -m torch.distributed.run --nproc-per-node $NGPU tests/gpu/torch_check.py ccl > "$L/torch_ccl.log" 2>&1; say "torch ccl (TORCH_NCCL_USE_COMM_NONBLOCKING=1) exit $?"
python3 tests/gpu/torch_compare.py "$CCL_TORCH_OUT" nccl ccl $NGPU 2>&1 | tail -n 3 | tee -a "$S"
rm -rf "$CCL_TORCH_OUT"
# Collectives captured in CUDA graphs, replayed and checked (NVIDIA NCCL beside).
[ "${QUICK:-0}" = 1 ] && { cd "$OUT" && tar czf logs.tgz logs && rm -rf logs; exit 0; }
CCL=$CCL bash tests/gpu/device_graph.sh > "$L/graph.txt" 2>&1; say "graph capture exit $?"
grep -E "us/op|wrong" "$L/graph.txt" | tee -a "$S"
# Captured groups on the direct paths against NCCL's captured kernels (ccl-perf -G, graph-checked).
OUT=$L OPS="all_reduce sendrecv all_gather" MAX=16M STEP=16 CCL=$CCL bash tests/gpu/device_graph_direct.sh > "$L/graph_direct.txt" 2>&1
grep -E "^==|^ +(8|16777216) " "$L/graph_direct.txt" | tee -a "$S"

cd "$OUT" && tar czf logs.tgz logs && rm -rf logs
