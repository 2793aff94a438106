#!/usr/bin/env bash
# Builds NVIDIA's nccl-tests (source in .dev/nccl-tests, fetched from NVIDIA/nccl-tests) with MPI
# against the PyTorch wheel's NCCL headers, unless .dev/nccl-tests/build already holds it.
# Sourced or run by the device scripts; the build log goes to ${1:-/tmp}/build.log.
NV=${NV:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
if [ ! -x .dev/nccl-tests/build/all_reduce_perf ]; then
  mkdir -p /tmp/nvl "${1:-/tmp}" && ln -sf $NV/lib/libnccl.so.2 /tmp/nvl/libnccl.so
  make -C .dev/nccl-tests -j"$(nproc)" MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
    NCCL_HOME=$NV NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > "${1:-/tmp}/build.log" 2>&1 \
    || { echo "nccl-tests build failed"; tail -n 20 "${1:-/tmp}/build.log"; exit 1; }
fi
