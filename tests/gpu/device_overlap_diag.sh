#!/usr/bin/env bash
# Where libccl's send/receive loses 39% of its bandwidth beside a GEMM (issue 5) while the copy
# engines alone lose 1% (measured 2026-11-23 with tests/gpu/ce_beside_torch_gemm.py). One device call, ~4 minutes:
#   1. tests/gpu/ce_beside_torch_gemm.py: plain and flagged exchanges beside the GEMM, then
#      beside a second thread that keeps launching it, and one driver call's host time then;
#   2. tests/gpu/device_p2p.sh for sendrecv and all_gather_inplace with OVERLAP_TRACE=1 (CUPTI
#      traces summarized by trace_gaps.py) and libccl at NCCL_DEBUG=INFO (its queueing and
#      push-wait account), NVIDIA NCCL beside it.
# Needs .dev/libnccl.so.2 carried. Writes $OUT/overlap-diag.txt and $OUT/overlap-diag.tgz.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$OUT/overlap-diag.txt; : > "$R"
echo "### ce_beside_torch_gemm.py" >> "$R"
timeout 120 python3 tests/gpu/ce_beside_torch_gemm.py >> "$R" 2>&1
echo "### device_p2p.sh, OVERLAP_TRACE=1" >> "$R"
mkdir -p "$OUT/diag"
OUT=$OUT/diag SKIP_PP=1 OVERLAP_TRACE=1 OVERLAP_COLLS="${OVERLAP_COLLS:-sendrecv all_gather_inplace}" \
  OVERLAP_TRACE_COLLS="${OVERLAP_TRACE_COLLS:-sendrecv}" timeout 300 bash tests/gpu/device_p2p.sh > /dev/null 2>&1
cat "$OUT/diag/p2p_summary.md" >> "$R" 2>/dev/null
(cd "$OUT" && tar czf overlap-diag.tgz diag && rm -rf diag)
cat "$R"
