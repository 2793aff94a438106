#!/usr/bin/env bash
# VMM ncclMemAlloc on the GPU machine: the ccl-cuda VMM test binary (built here with
# `cargo test --release -p ccl-cuda --test vmm --no-run`, copied to .dev/vmm_test), then
# tests/gpu/reuse.c across two processes with NCCL_CUMEM_ENABLE=1 (ncclMemAlloc buffers exported
# as file descriptors). Writes $OUT/vmm.md and logs under $OUT/vmm_logs.
set -uo pipefail
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/vmm_logs; mkdir -p "$L"
S=$OUT/vmm.md; : > "$S"
say() { echo "$*" | tee -a "$S"; }
timeout -s KILL 120 .dev/vmm_test --nocapture --test-threads 1 > "$L/vmm_test.log" 2>&1
say "vmm_test: exit $? — $(grep -E '^test result' "$L/vmm_test.log")"
grep -E '^test .*(ok|FAILED|ignored)' "$L/vmm_test.log" | tee -a "$S"
mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/reuse.c -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -o /tmp/reuse > "$L/reuse.build.log" 2>&1 || say "reuse.c build failed"
for cumem in 0 1; do
  NCCL_CUMEM_ENABLE=$cumem NCCL_DEBUG=INFO timeout -s KILL 90 mpirun --allow-run-as-root --bind-to none \
    -np 2 -x NCCL_DEBUG -x NCCL_CUMEM_ENABLE /tmp/reuse > "$L/reuse.$cumem.log" 2>&1
  say "reuse NCCL_CUMEM_ENABLE=$cumem: exit $? $(grep -hE 'PASS|FAIL' "$L/reuse.$cumem.log" | head -n 3 | tr '\n' ' ')"
  grep -h "straight between user buffers\|no CUDA VMM\|file descriptor\|VMM" "$L/reuse.$cumem.log" | sed 's/.*rank/  rank/' | head -n 6 | tee -a "$S"
done
