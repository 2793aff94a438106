#!/usr/bin/env bash
# Builds the workspace and lays out libnccl.so.2 the way NVIDIA ships it:
#   target/<profile>/libnccl.so.2.28.9 (the file), libnccl.so.2 and libnccl.so (links).
# Usage: scripts/build-lib.sh [debug|release]   (prints the library directory)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-debug}
if [ "$profile" = release ]; then
  cargo build --release --workspace --bins --lib >&2
else
  cargo build --workspace --bins --lib >&2
fi
dir=target/$profile
cp -f "$dir/libnccl.so" "$dir/libnccl.so.2.28.9.tmp"
mv -f "$dir/libnccl.so.2.28.9.tmp" "$dir/libnccl.so.2.28.9"
ln -sf libnccl.so.2.28.9 "$dir/libnccl.so.2"
echo "$dir"
