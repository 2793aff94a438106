#!/usr/bin/env bash
# The test command: installs what it needs, runs every Rust test (unit, property, simulation,
# multi-process fault tests), then the C ABI tests under mpirun (one host: shm; two network
# namespaces: TCP).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# Line tables keep panics' file:line while the test build takes a fraction of the disk full
# debug info does (a CI machine once ran out of space mid-build); incremental state is of no
# use to a one-off build.
export CARGO_PROFILE_DEV_DEBUG=${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
libdir=$(scripts/build-lib.sh debug)
cargo test --workspace 2>&1 | tee target/cargo-test.log
# The host reductions once more optimised: release builds reorder what debug builds keep
# (an f64 NaN payload once depended on it), and the library ships optimised.
cargo test --release -p ccl-cuda --test reduce --test reduce_prop 2>&1 | tee -a target/cargo-test.log
# Every kernel source through NVIDIA's runtime compiler (fetched from PyPI where it can be):
# kernels otherwise first compile on a GPU machine, at their first launch.
nvrtc=$(scripts/nvrtc.sh)
if [ -n "$nvrtc" ]; then
  LD_LIBRARY_PATH=$nvrtc cargo test --release -p ccl-cuda --test nvrtc_compile 2>&1 | tee -a target/cargo-test.log
else
  echo "nvrtc: could not be fetched; the kernels were not compiled"
fi
if [ -x tests/abi/run.sh ]; then
  tests/abi/run.sh "$libdir"
  # Two ranks over the multipath transport with every all-reduce in one exchange (each rank
  # folds the other's whole input; in place each frame is sent before the fold overwrites
  # it): every type, reduction and count of coll_check, in place and out of place.
  NP=2 NCCL_SHM_DISABLE=1 CCL_NET=mpt CCL_ALLREDUCE_EXCHANGE_BYTES=1 \
    CCL_ALLREDUCE_EXCHANGE_MAX_BYTES=1073741824 tests/abi/run.sh --no-netns "$libdir"
  # Four ranks on two hosts (network namespaces) with every all-reduce hierarchical (host
  # reduce-scatter, all-reduce across the hosts, host all-gather; on for host memory here, by
  # default only for GPU memory): every type, reduction and count of coll_check.
  CCL_HIERARCHY=1 tests/abi/run.sh --no-one-host "$libdir"
  # Three ranks: hosts of two ranks and one (as after a shrink): all-reduces through each
  # host's first rank, all-gathers block by block, broadcasts and reduces whose root's index
  # every host holds, the rest flat.
  NP=3 CCL_HIERARCHY=1 tests/abi/run.sh --no-one-host "$libdir"
fi
# A NIC port dies under a running all_reduce: two network namespaces joined by two veth
# "NICs", the multipath transport's paths spread over both (CCL_MPT_IFNAMES), one cut.
LIBDIR=$libdir SIZE=8M ITERS=200 tests/bench/nic_failover.sh target/nic-failover
# The same with receiver-driven credits (EQDS), whose sender once waited forever for credit
# that went out on a dead path.
CCL_MPT_CC=eqds LIBDIR=$libdir SIZE=8M ITERS=200 tests/bench/nic_failover.sh target/nic-failover-eqds
# One closing line summing up what ran (cargo's own lines are above).
passed=$(grep -Eo '[0-9]+ passed' target/cargo-test.log | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/cargo-test.log | awk '{s+=$1} END {print s+0}')
echo "rust: $passed passed, $failed failed"
