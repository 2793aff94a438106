#!/usr/bin/env bash
# NVIDIA's inspector profiler plugin on a machine without CUDA: built from NCCL's sources
# against stand-in CUDA headers and libraries written here (the inspector asks CUDA only for a
# device ordinal and UUID), loaded by libccl (host backend) through NCCL_PROFILER_PLUGIN under
# ccl-perf all_reduce, 2 ranks under mpirun; prints the inspector's busbw beside ccl-perf's.
# It checks the plugin ABI and the host-side timing; tests/gpu/profiler_inspector.sh checks
# the GPU timing.
#
#   NCCL_SRC=/path/to/nccl LIBDIR=target/release tests/bench/profiler_inspector_host.sh [OUTDIR]
#
# LIBDIR holds libnccl.so.2 (scripts/build-lib.sh) and ccl-perf (or set CCL_PERF). ARGS are
# ccl-perf's size and iteration flags (default -b 64K -e 16M -f 4 -n 20 -w 5). The stand-in
# libcuda.so.1 reports no GPU: never run this on a GPU machine's library path.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-target/profiler-inspector-host}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
NCCL_SRC=${NCCL_SRC:?set NCCL_SRC to a copy of NVIDIA/nccl}
LIBDIR=$(cd "${LIBDIR:-target/release}" && pwd)
PERF=${CCL_PERF:-$LIBDIR/ccl-perf}
read -r -a ARGS <<< "${ARGS:--b 64K -e 16M -f 4 -n 20 -w 5}"

stub=$OUT/cuda-stub; mkdir -p "$stub/include" "$stub/lib64"
cat > "$stub/include/cuda.h" <<'EOF'
#pragma once
typedef int CUresult;
typedef int CUdevice;
typedef struct { char bytes[16]; } CUuuid;
#define CUDA_SUCCESS 0
EOF
cat > "$stub/include/cuda_runtime.h" <<'EOF'
#pragma once
typedef int cudaError_t;
#define cudaSuccess 0
#ifdef __cplusplus
extern "C" {
#endif
cudaError_t cudaGetDevice(int *d);
const char *cudaGetErrorString(cudaError_t e);
#ifdef __cplusplus
}
#endif
EOF
cat > "$stub/cudart.c" <<'EOF'
int cudaGetDevice(int *d) { *d = 0; return 0; }
const char *cudaGetErrorString(int e) { (void)e; return "stand-in"; }
EOF
# The driver: what the inspector asks for, and no device for anyone else (cuInit fails).
cat > "$stub/cuda.c" <<'EOF'
int cuInit(unsigned f) { (void)f; return 100; }
int cuDeviceGetCount(int *c) { *c = 0; return 0; }
int cuDriverGetVersion(int *v) { *v = 12040; return 0; }
int cuGetErrorString(int e, const char **s) { (void)e; *s = "stand-in"; return 0; }
int cuDeviceGet(int *d, int o) { *d = o; return 0; }
int cuDeviceGetUuid(char *u, int d) { for (int i = 0; i < 16; i++) u[i] = (char)(i + d); return 0; }
int cuDeviceGetUuid_v2(char *u, int d) { return cuDeviceGetUuid(u, d); }
EOF
cc -shared -fPIC -o "$stub/lib64/libcudart.so" "$stub/cudart.c" &&
  cc -shared -fPIC -o "$stub/lib64/libcuda.so.1" "$stub/cuda.c" || { echo "stand-ins failed"; exit 2; }

rm -rf "$OUT/inspector" && cp -r "$NCCL_SRC/plugins/profiler/inspector" "$OUT/inspector" || exit 2
make -C "$OUT/inspector" -j2 CUDA_HOME="$stub" > "$OUT/plugin-build.log" 2>&1 \
  || { echo "inspector build failed"; tail -n 20 "$OUT/plugin-build.log"; exit 2; }

dump=$OUT/dump; rm -rf "$dump"; mkdir -p "$dump"
LD_LIBRARY_PATH=$LIBDIR:$stub/lib64 CCL_DEVICE=host \
  NCCL_PROFILER_PLUGIN=$OUT/inspector/libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1 \
  NCCL_INSPECTOR_DUMP_DIR=$dump NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000 \
  timeout 600 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
  -x LD_LIBRARY_PATH -x CCL_DEVICE -x NCCL_PROFILER_PLUGIN -x NCCL_INSPECTOR_ENABLE \
  -x NCCL_INSPECTOR_DUMP_DIR -x NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS \
  "$PERF" all_reduce "${ARGS[@]}" -c 0 --mem host > "$OUT/all_reduce.log" 2>&1
echo "ccl-perf exit $?; inspector files: $(ls "$dump" | wc -l)"
python3 tests/gpu/inspector_compare.py "$OUT/all_reduce.log" "$dump" 2 ccl-host \
  | tee "$OUT/compare.md"
