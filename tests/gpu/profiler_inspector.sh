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
# the PyTorch wheel the same way, as a reference for the plugin itself. With one GPU,
# NCCL_TESTS_DEVICE=0 puts both ranks on it (libccl only). Logs under $OUT.
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
  # The plugin needs libcudart from CUDA_HOME, wherever the loader looks by default.
  LD_LIBRARY_PATH=$dir:$CUDA_HOME/lib64 NCCL_PROFILER_PLUGIN=$PLUGIN NCCL_INSPECTOR_ENABLE=1 \
    NCCL_INSPECTOR_DUMP_DIR=$dump NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000 \
    NCCL_DEBUG=${NCCL_DEBUG:-WARN} \
    timeout -s KILL 300 mpirun --allow-run-as-root --bind-to none -np "$NGPU" \
    -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x NCCL_PROFILER_PLUGIN -x NCCL_INSPECTOR_ENABLE \
    -x NCCL_INSPECTOR_DUMP_DIR -x NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS -x NCCL_DEBUG \
    ${NCCL_TESTS_DEVICE:+-x NCCL_TESTS_DEVICE} .dev/nccl-tests/build/all_reduce_perf -b "$MIN" -e "$MAX" -f 2 -c 0 -n "$ITERS" -w "$WARMUP" \
    > "$L/all_reduce.$name.log" 2>&1
  echo "$name: all_reduce_perf exit $?; inspector files: $(ls "$dump" | wc -l)"
  python3 tests/gpu/inspector_compare.py "$L/all_reduce.$name.log" "$dump" "$NGPU" "$name" \
    | tee "$L/compare.$name.md"
done
