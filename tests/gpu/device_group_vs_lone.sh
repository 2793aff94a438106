#!/usr/bin/env bash
# The staged GPU path over the network transport: tests/gpu/group_vs_lone.c (large all-reduce,
# all-to-all, broadcast and reduce that rank 0 calls alone and rank 1 calls in a group, both
# ranks on GPU 0) against each library in LIBS (directories under .dev holding a
# libnccl.so.2; default "cur"), 60 s each; then, unless NETCHECK=0, the network path's check of
# all nine operations (tests/gpu/device_net_check.sh, MAX=32M) with .dev/libnccl.so.2.
# Run from the repository root on the device with .dev carried.
set -u
export NCCL_NVLS_ENABLE=0 ONE_GPU=1
for lib in ${LIBS:-cur}; do
  gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/group_vs_lone.c \
    -L ".dev/$lib" -Wl,-rpath,"$PWD/.dev/$lib" -l:libnccl.so.2 -L /usr/local/cuda/lib64 \
    -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -lpthread -o "/tmp/gvl_$lib" || echo "build failed"
  echo "## group_vs_lone, .dev/$lib"
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt timeout -s KILL 60 "/tmp/gvl_$lib" 2>&1 |
    grep -E "PASS|FAIL|SKIP"
  echo "exit ${PIPESTATUS[0]}"
done
[ "${NETCHECK:-1}" = 0 ] || MAX=32M bash tests/gpu/device_net_check.sh 2>&1 | tail -n 18
