#!/usr/bin/env bash
# Issue 4's measurements in one device call: ccl-perf for the nine ops beside NVIDIA's NCCL
# (same binary, LD_LIBRARY_PATH switches the library) at 8 B, 1 MiB, 128 MiB and 512 MiB, as
# -g N and as mpirun -np N (N = NGPU, default 2), then PyTorch on both compared (bit for bit
# with 2 ranks; see torch_compare.py for more). Writes logs and summary.md (busbw / latency
# ratios libccl / NCCL, of the -g N runs) under $OUT.
# Needs .dev/libnccl.so.2 and .dev/ccl-perf (scripts/build-lib.sh release; copy; strip).
# Usage: tests/gpu/device_accept.sh [ops...]   (default: all nine)
# Env: NGPU, SIZES, ACCEPT_N / ACCEPT_W (iterations / warm-up, default 20 / 5), ACCEPT_MPI=0 (skip mpirun runs), ACCEPT_TORCH=0 (skip PyTorch),
# CCL_ENV_B="VAR=value ..." (the -g N runs once more with these libccl settings, library
# "cclb", e.g. CCL_IPC_LL_EXCHANGE_BYTES=4096; its latency ratio gets a column).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
CCL=$PWD/.dev; OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"
NGPU=${NGPU:-2}; G=g$NGPU
TX=$((30 * (NGPU - 2)))  # more time for PyTorch with more ranks (0 with 2)
OPS=${*:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter}
SIZES=${SIZES:-8 1M 128M 512M}
for op in $OPS; do
  for size in $SIZES; do
    for lib in nccl ccl ${CCL_ENV_B:+cclb}; do
      [ $lib = nccl ] && LP=$NV || LP=$CCL
      [ $lib = cclb ] && B=$CCL_ENV_B || B=
      env $B LD_LIBRARY_PATH=$LP timeout -s KILL ${ACCEPT_TIMEOUT:-40} .dev/ccl-perf $op -b $size -e $size -n ${ACCEPT_N:-20} -w ${ACCEPT_W:-5} -c 1 -g $NGPU \
        --json "$L/$G.$op.$size.$lib.json" > "$L/$G.$op.$size.$lib.log" 2>&1
      echo "exit $?" >> "$L/$G.$op.$size.$lib.log"
    done
  done
  [ "${ACCEPT_MPI:-1}" = 1 ] || continue
  for lib in nccl ccl ${CCL_ENV_B:+cclb}; do
    [ $lib = nccl ] && LP=$NV || LP=$CCL
    [ $lib = cclb ] && B=$CCL_ENV_B || B=
    env $B LD_LIBRARY_PATH=$LP timeout -s KILL ${ACCEPT_TIMEOUT:-40} mpirun --allow-run-as-root --bind-to none -np $NGPU -x LD_LIBRARY_PATH \
      $(for kv in $B; do echo "-x ${kv%%=*}"; done) \
      -x NCCL_NVLS_ENABLE .dev/ccl-perf $op -b 8 -e 128M -f 16384 -n ${ACCEPT_N:-20} -w ${ACCEPT_W:-5} -c 1 \
      > "$L/mpi.$op.$lib.log" 2>&1
    echo "exit $?" >> "$L/mpi.$op.$lib.log"
  done
done
if [ "${ACCEPT_TORCH:-1}" = 1 ]; then
export CCL_TORCH_OUT=$OUT/torch; mkdir -p "$CCL_TORCH_OUT"
timeout $((150 + TX)) python3 -m torch.distributed.run --nproc-per-node $NGPU tests/gpu/torch_check.py nccl > "$L/torch_nccl.log" 2>&1; echo "exit $?" >> "$L/torch_nccl.log"
LD_PRELOAD=$CCL/libnccl.so.2 timeout $((150 + TX)) python3 -m torch.distributed.run --nproc-per-node $NGPU tests/gpu/torch_check.py ccl > "$L/torch_ccl.log" 2>&1; echo "exit $?" >> "$L/torch_ccl.log"
python3 tests/gpu/torch_compare.py "$CCL_TORCH_OUT" nccl ccl $NGPU > "$L/torch_compare.log" 2>&1
rm -rf "$CCL_TORCH_OUT"
fi
python3 - "$L" "$G" > "$OUT/summary.md" <<'PY'
import glob, os, re, sys
d, g = sys.argv[1], sys.argv[2]
rows = {}
for f in glob.glob(os.path.join(d, g + ".*.log")):
    _, op, size, lib, _ = os.path.basename(f).split(".")
    for line in open(f):
        m = re.match(r"\s+(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s+[\d.]+\s+([\d.]+)\s+(\S+)", line)
        if m:
            rows.setdefault((op, size), {})[lib] = (float(m.group(2)), float(m.group(3)), m.group(4))
print("| op | size | NCCL time us | libccl time us | NCCL busbw | libccl busbw | busbw ratio | latency ratio | libccl #wrong |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for (op, size), v in sorted(rows.items()):
    n, c = v.get("nccl"), v.get("ccl")
    if not n or not c:
        print(f"| {op} | {size} | {n} | {c} | | | | | |"); continue
    br = c[1] / n[1] if n[1] else 0
    lr = c[0] / n[0] if n[0] else 0
    b = v.get("cclb")
    extra = f" cclb: {b[0]} us, latency ratio {b[0] / n[0]:.2f}, busbw ratio {b[1] / n[1] if n[1] else 0:.2f}, #wrong {b[2]}" if b and n[0] else ""
    print(f"| {op} | {size} | {n[0]} | {c[0]} | {n[1]} | {c[1]} | {br:.2f} | {lr:.2f} | {c[2]} |{extra}")
PY
[ -f "$L/torch_compare.log" ] && tail -1 "$L/torch_compare.log" >> "$OUT/summary.md"
cd "$OUT" && tar czf logs.tgz logs && rm -rf logs
cat "$OUT/summary.md"
