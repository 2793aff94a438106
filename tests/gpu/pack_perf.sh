#!/usr/bin/env bash
# Copies this machine's perf and the shared libraries it needs (all but the C/C++ runtime,
# which the GPU machine has) into .dev/perf, for tests/gpu/device_net_profile.sh: the GPU
# machine has no perf. Run here before a device call that carries .dev.
set -euo pipefail
cd "$(dirname "$0")/../.."
perf=$(command -v perf) || { echo "no perf here (apt-get install -y linux-perf)" >&2; exit 1; }
mkdir -p .dev/perf/lib
cp -L "$perf" .dev/perf/perf
ldd "$(readlink -f "$perf")" | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
    *) cp -L "$lib" .dev/perf/lib/ ;;
  esac
done
LD_LIBRARY_PATH=.dev/perf/lib .dev/perf/perf --version
du -sh .dev/perf
