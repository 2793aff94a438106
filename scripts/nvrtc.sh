#!/usr/bin/env bash
# Best effort: NVIDIA's NVRTC (the nvidia-cuda-nvrtc-cu12 wheel from PyPI) unpacked under
# target/nvrtc, so a test can compile every kernel without a GPU or the CUDA toolkit
# (cuda/tests/nvrtc_compile.rs). Prints the library folder, or nothing where it cannot be
# fetched (no pip, no network): the test then skips.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=target/nvrtc
lib=$dir/nvidia/cuda_nvrtc/lib
if [ ! -e "$lib/libnvrtc.so.12" ]; then
  mkdir -p "$dir"
  timeout 300 python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 -d "$dir" 'nvidia-cuda-nvrtc-cu12==12.9.86' > /dev/null 2>&1 || exit 0
  python3 -c 'import glob, sys, zipfile; zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0]).extractall(sys.argv[1])' \
    "$dir" 2> /dev/null || exit 0
fi
[ -e "$lib/libnvrtc.so.12" ] && realpath "$lib"
exit 0
