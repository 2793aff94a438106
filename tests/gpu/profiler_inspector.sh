#!/usr/bin/env bash
# NVIDIA's inspector profiler plugin, built from NCCL's own sources, loaded by libccl through
# NCCL_PROFILER_PLUGIN under nccl-tests' all_reduce_perf; prints the inspector's bus bandwidth
# beside nccl-tests' per size (docs/PROFILER.md says where each figure comes from).
#
#   NCCL_SRC=.dev/nccl LIBDIR=.dev/new tests/gpu/profiler_inspector.sh
#
# NCCL_SRC  a copy of NVIDIA/nccl's tree (only plugins/profiler/inspector is used; the device
#           has no internet, so it travels with the working tree: after fetching NVIDIA/nccl,
#           `git -C <mirror> archive HEAD plugins/profiler/inspector | tar -x -C .dev/nccl`),
#           default .dev/nccl
# LIBDIR    the directory holding libccl's libnccl.so.2 (scripts/build-lib.sh release, copied
#           there), default .dev/new
# nccl-tests' source must lie in .dev/nccl-tests; it is built unless its build/ exists.
# NGPU (2), MIN (1M), MAX (1G), ITERS (20), WARMUP (5); WITH_NCCL=1 also runs NVIDIA's NCCL of
# the PyTorch wheel the same way, as a reference for the plugin itself. Logs under $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; L=$OUT/inspector; mkdir -p "$L"
NCCL_SRC=${NCCL_SRC:-.dev/nccl}; LIBDIR=${LIBDIR:-.dev/new}
NGPU=${NGPU:-2}; MIN=${MIN:-1M}; MAX=${MAX:-1G}; ITERS=${ITERS:-20}; WARMUP=${WARMUP:-5}
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
case $LIBDIR in /*) ;; *) LIBDIR=$PWD/$LIBDIR ;; esac

# The plugin, built outside the source tree (its Makefile writes obj/ and version.cc there).
src=$NCCL_SRC/plugins/profiler/inspector
[ -f "$src/inspector_plugin.cc" ] || { echo "no inspector sources in $src"; exit 1; }
rm -rf /tmp/inspector-build && cp -r "$src" /tmp/inspector-build
make -C /tmp/inspector-build -j"$(nproc)" CUDA_HOME="$CUDA_HOME" > "$L/plugin-build.log" 2>&1 \
  || { echo "inspector build failed"; tail -n 20 "$L/plugin-build.log"; exit 1; }
PLUGIN=/tmp/inspector-build/libnccl-profiler-inspector.so

if [ ! -x .dev/nccl-tests/build/all_reduce_perf ]; then
  mkdir -p /tmp/nvl && ln -sf $NV/lib/libnccl.so.2 /tmp/nvl/libnccl.so
  make -C .dev/nccl-tests -j"$(nproc)" MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
    NCCL_HOME=$NV NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > "$L/tests-build.log" 2>&1 \
    || { echo "nccl-tests build failed"; tail -n 20 "$L/tests-build.log"; exit 1; }
fi

runs="ccl=$LIBDIR"
[ "${WITH_NCCL:-0}" = 1 ] && runs="$runs nccl=$NV/lib"
for entry in $runs; do
  name=${entry%%=*}; dir=${entry#*=}
  [ -e "$dir/libnccl.so" ] || ln -sf libnccl.so.2 "$dir/libnccl.so" 2>/dev/null
  dump=$L/dump-$name; rm -rf "$dump"; mkdir -p "$dump"
  LD_LIBRARY_PATH=$dir NCCL_PROFILER_PLUGIN=$PLUGIN NCCL_INSPECTOR_ENABLE=1 \
    NCCL_INSPECTOR_DUMP_DIR=$dump NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000 \
    NCCL_DEBUG=${NCCL_DEBUG:-WARN} \
    timeout -s KILL 300 mpirun --allow-run-as-root --bind-to none -np "$NGPU" \
    -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x NCCL_PROFILER_PLUGIN -x NCCL_INSPECTOR_ENABLE \
    -x NCCL_INSPECTOR_DUMP_DIR -x NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS -x NCCL_DEBUG \
    .dev/nccl-tests/build/all_reduce_perf -b "$MIN" -e "$MAX" -f 2 -c 0 -n "$ITERS" -w "$WARMUP" \
    > "$L/all_reduce.$name.log" 2>&1
  echo "$name: all_reduce_perf exit $?; inspector files: $(ls "$dump" | wc -l)"
  python3 - "$L/all_reduce.$name.log" "$dump" "$NGPU" "$name" <<'EOF' | tee "$L/compare.$name.md"
import json, os, statistics, sys
log, dump, n, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
# nccl-tests rows: size count type redop root | time algbw busbw #wrong (out of place) | same in place
tests = {}
for line in open(log, errors="replace"):
    f = line.split()
    if len(f) >= 13 and f[0].isdigit():
        try:
            tests[int(f[0])] = (float(f[7]), float(f[11]))
        except ValueError:
            pass
# inspector: JSON objects, one after the other, in every rank's file
times, sources = {}, {}
dec = json.JSONDecoder()
for fn in sorted(os.listdir(dump)):
    text = open(os.path.join(dump, fn), errors="replace").read()
    i = 0
    while True:
        while i < len(text) and text[i] not in "{":
            i += 1
        if i >= len(text):
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except ValueError:
            i += 1
            continue
        p = obj.get("coll_perf") if isinstance(obj, dict) else None
        if not p or p.get("coll") != "AllReduce":
            continue
        size = int(p["coll_msg_size_bytes"])
        times.setdefault(size, []).append(float(p["coll_exec_time_us"]))
        src = p.get("coll_timing_source", "?")
        sources[src] = sources.get(src, 0) + 1
factor = 2.0 * (n - 1) / n
print(f"\n{name}: all_reduce_perf busbw (GB/s) beside the inspector's, {n} ranks; "
      f"inspector timing sources {sources}")
print("| bytes | nccl-tests oop | nccl-tests ip | inspector (median us) | inspector busbw | records | inspector / nccl-tests |")
print("|---|---|---|---|---|---|---|")
worst = 0.0
for size in sorted(tests):
    oop, ip = tests[size]
    ts = times.get(size, [])
    if not ts:
        print(f"| {size} | {oop:.2f} | {ip:.2f} | - | - | 0 | - |")
        continue
    t = statistics.median(ts)
    bw = size / 1e9 / (t / 1e6) * factor if t > 0 else 0.0
    ref = (oop + ip) / 2
    ratio = bw / ref if ref > 0 else 0.0
    if t >= 20:
        worst = max(worst, abs(ratio - 1))
    print(f"| {size} | {oop:.2f} | {ip:.2f} | {t:.0f} | {bw:.2f} | {len(ts)} | {ratio:.3f} |")
print(f"\nlargest difference where an operation takes 20 us or more: {worst * 100:.1f}%")
EOF
done
