#!/usr/bin/env bash
# The main job: a multi-rank collective benchmark with correctness checking. Builds libccl
# (release), then runs ccl-perf over all_reduce, all_gather and alltoall with 4 ranks under
# mpirun. With no GPU the ranks use the host backend: host memory, shared memory between them.
# MAX sets the largest size (default 64M: MAX=256M scripts/run.sh); extra arguments go to
# ccl-perf (e.g. scripts/run.sh -n 50).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
libdir=$(scripts/build-lib.sh release)
np=${NP:-4}
for op in all_reduce all_gather alltoall; do
  LD_LIBRARY_PATH="$PWD/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    mpirun --allow-run-as-root --oversubscribe -np "$np" \
      -x LD_LIBRARY_PATH -x NCCL_SOCKET_IFNAME=lo \
      "$libdir/ccl-perf" "$op" -b 8 -e "${MAX:-64M}" -f 4 -c 1 "$@"
done
