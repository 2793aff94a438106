#!/usr/bin/env bash
# The next nvidia-h200-x2 calls, one MODE per call (carry .dev; .whl for megatron):
#   MODE=oldnew   issue 40: NVIDIA NCCL, the build before the restructuring (.dev/old) and the
#                 current one (.dev/new) in one call, nine ops 8 B - 512 MiB, then 2 MiB best of
#                 three, then the PyTorch check
#   MODE=mailed   issue 40/41: mailed sends' nccl-tests beside NCCL and the default
#                 (docs/device-runs/2026-11-29-mailed/x2_mailed.sh, LIB=.dev/new)
#   MODE=round    the two-GPU regression round (tests/gpu/device_round.sh)
#   MODE=monitor  issue 43: monitor on / off on two GPUs (tests/gpu/device_monitor.sh)
set -uo pipefail
O=${OUT:-/tmp/out}
case ${MODE:-oldnew} in
  oldnew)
    bash docs/device-runs/2026-11-28-arch/x2_nccl_tests_torch.sh 2>&1 | tail -n 40
    OUT=$O/two REPS=3 LIBS="nccl old=.dev/old new=.dev/new" NGPU=2 EXTRA="-b 2M -e 2M -n 200 -w 20" \
      bash tests/gpu/nccl_tests_ab.sh 2>&1 | tail -n 12 ;;
  mailed) LIB=.dev/new bash docs/device-runs/2026-11-29-mailed/x2_mailed.sh ;;
  round) NGPU=2 bash tests/gpu/device_round.sh > /dev/null 2>&1; cat "$O/summary.md" ;;
  monitor) NGPU=2 LIB=.dev/new bash tests/gpu/device_monitor.sh > /dev/null 2>&1; cat "$O/monitor.md" ;;
esac
