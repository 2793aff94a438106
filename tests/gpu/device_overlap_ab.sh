#!/usr/bin/env bash
# overlap.py (two host threads, events made before the loops) for NVIDIA NCCL and libccl
# settings side by side in one call, with the GPUs' power draw and SM clock sampled every
# 100 ms during each run (is the GEMM's slowdown beside copy-engine traffic its power cap?).
# VARIANTS: "label:VAR=v,VAR2=v ..." (a label starting with nccl runs NVIDIA NCCL; "label:"
# runs libccl's defaults). OVERLAP_COLLS (default sendrecv). Needs .dev/libnccl.so.2.
# Writes $OUT/overlap-ab.txt and a power log per run.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=$OUT/overlap-ab.txt; : > "$R"
CCL=$PWD/.dev
export NCCL_NVLS_ENABLE=0 OVERLAP_COLLS=${OVERLAP_COLLS:-sendrecv}
port=29700
for v in ${VARIANTS:-nccl: ccl:}; do
  label=${v%%:*}; vars=${v#*:}
  pre=(LD_PRELOAD=$CCL/libnccl.so.2)
  case $label in nccl*) pre=() ;; esac
  port=$((port + 1))
  echo "### $label (${pre[*]} ${vars//,/ })" >> "$R"
  nvidia-smi --query-gpu=timestamp,index,power.draw,power.limit,clocks.sm,clocks.mem \
    --format=csv,noheader -lms 100 > "$OUT/power_$label.csv" 2>&1 &
  smi=$!
  env "${pre[@]}" ${vars//,/ } timeout -s KILL 150 python3 -m torch.distributed.run --nproc-per-node 2 \
    --master-port $port tests/gpu/overlap.py "$label" > "$OUT/$label.log" 2>&1
  echo "exit $?" >> "$R"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  grep -E "^OVERLAP " "$OUT/$label.log" | cut -c1-400 >> "$R"
  # Power and SM clock of GPU 0 over the run: median and 10th percentile of each.
  python3 - "$OUT/power_$label.csv" >> "$R" <<'PY'
import sys
p, c = [], []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    if len(f) >= 5 and f[1] == "0":
        try:
            p.append(float(f[2].split()[0])); c.append(float(f[4].split()[0]))
        except ValueError:
            pass
for name, v in (("power W", p), ("sm MHz", c)):
    v.sort()
    if v:
        print(f"  gpu0 {name}: p10 {v[len(v)//10]:.0f} p50 {v[len(v)//2]:.0f} p90 {v[len(v)*9//10]:.0f} max {v[-1]:.0f} ({len(v)} samples)")
PY
  pkill -KILL -f tests/gpu/overlap.py 2>/dev/null; sleep 1
done
cat "$R"
