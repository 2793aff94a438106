#!/usr/bin/env bash
# Builds what the GPU machines run into .dev/NAME (ignored, carried with `run`): libnccl.so.2
# (its symbol table kept, for perf), ccl-perf, and for the main build ccl-report,
# ccl-monitor, the ce_both_ways probe and gpu_backend_test, with COMMIT naming the source.
# From the working tree, or from REV through a temporary git worktree, built there and
# removed with it (an old build measured beside the new one in one device call; a few minutes
# and a few GB of disk while it builds).
#   scripts/dev-build.sh            -> .dev and .dev/new from the working tree
#   scripts/dev-build.sh REV NAME   -> .dev/NAME from commit REV
set -euo pipefail
cd "$(dirname "$0")/.."
put() {  # put TARGET_DIR DEST
  mkdir -p "$2"
  cp -L "$1/libnccl.so.2" "$2/libnccl.so.2" && strip --strip-debug "$2/libnccl.so.2"
  cp "$1/ccl-perf" "$2/" && strip "$2/ccl-perf"
}
if [ $# -eq 0 ]; then
  dir=$(scripts/build-lib.sh release)
  for d in .dev .dev/new; do put "$dir" "$d"; git describe --always --dirty > "$d/COMMIT"; done
  for t in ccl-report ccl-monitor; do cp "$dir/$t" .dev/ && strip ".dev/$t"; done
  # The copy-engine probe of cuda/examples (no library: one GPU moving both directions), and
  # the CUDA backend's GPU tests (the kernels on real GPUs; they pass without one in CI).
  cargo build -q --release -p ccl-cuda --example ce_both_ways >&2
  cp target/release/examples/ce_both_ways .dev/ && strip .dev/ce_both_ways
  t=$(cargo test -q --release -p ccl-cuda --test gpu_backend --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*gpu_backend[^"]*\)".*/\1/p' | tail -n 1)
  cp "$t" .dev/gpu_backend_test && strip .dev/gpu_backend_test
else
  rev=$1 name=$2 wt=$(mktemp -d)
  git worktree add -q --detach "$wt" "$rev"
  trap 'git worktree remove --force "$wt"' EXIT
  dir=$(cd "$wt" && scripts/build-lib.sh release)
  put "$wt/$dir" ".dev/$name"
  git rev-parse --short "$rev" > ".dev/$name/COMMIT"
fi
ls -l .dev/${2:-new}
