#!/usr/bin/env bash
# The test command: installs what it needs, runs every Rust test (unit, property, simulation,
# multi-process fault tests), then the C ABI tests under mpirun (one host: shm; two network
# namespaces: TCP).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
libdir=$(scripts/build-lib.sh debug)
cargo test --workspace 2>&1 | tee target/cargo-test.log
if [ -x tests/abi/run.sh ]; then
  tests/abi/run.sh "$libdir"
fi
# One closing line summing up what ran (cargo's own lines are above).
passed=$(grep -Eo '[0-9]+ passed' target/cargo-test.log | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/cargo-test.log | awk '{s+=$1} END {print s+0}')
echo "rust: $passed passed, $failed failed"
