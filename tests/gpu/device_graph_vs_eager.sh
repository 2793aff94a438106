#!/usr/bin/env bash
# libccl's own CUDA-graph cost: nccl-tests eager and with -G 5 (each size's iterations captured
# in a graph, launched 5 times), the same library, ops and sizes, in one device call; per size
# the out-of-place time of both and their ratio (graph / eager: above 1, the graph is slower).
# NVIDIA NCCL runs captured about as fast as eager, so this ratio is what libccl's graphs lose.
#
#   NGPU=2 tests/gpu/device_graph_vs_eager.sh                        (two GPUs)
#   MPS=1 NGPU=4 NCCL_TESTS_DEVICE=0 tests/gpu/device_graph_vs_eager.sh  (one GPU, under MPS)
# LIB (default .dev), OPS, MIN/MAX sizes (64K / 64M). Summary in $OUT/graph_vs_eager.md.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; L=$OUT/graph; mkdir -p "$L"; S=$OUT/graph_vs_eager.md; : > "$S"
LIB=${LIB:-.dev}; NGPU=${NGPU:-2}
OPS=${OPS:-all_reduce reduce_scatter all_gather alltoall broadcast sendrecv}
source tests/gpu/mps.sh
bash tests/gpu/nccl_tests_build.sh "$L" || exit 1
for op in $OPS; do
  for g in 0 5; do
    LD_LIBRARY_PATH=$PWD/$LIB timeout -s KILL 150 mpirun --allow-run-as-root --bind-to none -np "$NGPU" \
      -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE ${NCCL_TESTS_DEVICE:+-x NCCL_TESTS_DEVICE} \
      ${CUDA_MPS_PIPE_DIRECTORY:+-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY} \
      .dev/nccl-tests/build/${op}_perf -b "${MIN:-64K}" -e "${MAX:-64M}" -f 4 -c 1 -n 20 -w 5 -G $g \
      > "$L/$op.G$g.log" 2>&1
    echo "$op G$g exit $?" >> "$L/exits.txt"
  done
  python3 - "$L" "$op" <<'PY' | tee -a "$S"
import sys
d, op = sys.argv[1:]
def rows(g):
    out = {}
    for line in open(f"{d}/{op}.G{g}.log", errors="replace"):
        t = line.split()
        if len(t) >= 13 and t[0].isdigit() and t[1].isdigit():
            out[int(t[0])] = (float(t[-8]), int(float(t[-5])) if t[-5] != "N/A" else 0)
    return out
e, g = rows(0), rows(5)
print(f"## {op}: out-of-place time per size, us (#wrong)")
print("| bytes | eager | graph | graph / eager |")
print("|---:|---:|---:|---:|")
for b in sorted(set(e) | set(g)):
    te, tg = e.get(b), g.get(b)
    ratio = f"{tg[0] / te[0]:.2f}" if te and tg and te[0] > 0 else "-"
    f = lambda x: f"{x[0]:.1f} ({x[1]})" if x else "-"
    print(f"| {b} | {f(te)} | {f(tg)} | {ratio} |")
PY
done
cat "$L/exits.txt" | tee -a "$S"
