#!/usr/bin/env bash
# The ccl-cuda test binaries that need a GPU, then VMM ncclMemAlloc across processes.
# Build here and carry in .dev:
#   cargo test --release -p ccl-cuda --test vmm --no-run          -> .dev/vmm_test
#   cargo test --release -p ccl-cuda --test gpu_backend --no-run  -> .dev/gpu_backend_test
# (the paths cargo prints under "Executable"). Every .dev/*_test runs; then tests/gpu/reuse.c
# across two processes with NCCL_CUMEM_ENABLE=0 and 1 (ncclMemAlloc buffers exported as file
# descriptors). Writes $OUT/vmm.md and logs under $OUT/vmm_logs.
set -uo pipefail
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/vmm_logs; mkdir -p "$L"
S=$OUT/vmm.md; : > "$S"
say() { echo "$*" | tee -a "$S"; }
for t in .dev/*_test; do
  [ -x "$t" ] || continue
  b=$(basename "$t")
  timeout -s KILL 120 "$t" --nocapture --test-threads 1 > "$L/$b.log" 2>&1
  say "$b: exit $? — $(grep -E '^test result' "$L/$b.log")"
  grep -E '^test .*(ok|FAILED|ignored)$|panicked|still running' "$L/$b.log" | tee -a "$S"
done
mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/reuse.c -L "$CCL" \
  -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -o /tmp/reuse > "$L/reuse.build.log" 2>&1 || say "reuse.c build failed"
for cumem in 0 1; do
  NCCL_CUMEM_ENABLE=$cumem NCCL_DEBUG=INFO timeout -s KILL 90 mpirun --allow-run-as-root --bind-to none \
    -np 2 -x NCCL_DEBUG -x NCCL_CUMEM_ENABLE /tmp/reuse > "$L/reuse.$cumem.log" 2>&1
  say "reuse NCCL_CUMEM_ENABLE=$cumem: exit $? $(grep -hE 'PASS|FAIL' "$L/reuse.$cumem.log" | head -n 3 | tr '\n' ' ')"
  grep -h "straight between user buffers\|no CUDA VMM\|file descriptor\|VMM" "$L/reuse.$cumem.log" | sed 's/.*rank/  rank/' | head -n 6 | tee -a "$S"
done
