#!/usr/bin/env bash
# nvidia-h200-x2, one call: nccl-tests nine ops, -b 8 -e 1G -f 2 -n 10 -w 3 -c 1, NVIDIA NCCL
# beside libccl (.dev/auto), cut at LIMIT seconds; every size's ratio and the plot by ccl-report.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
O=${OUT:-/tmp/out}
OUT=$O/sweep LIBS="nccl ccl=.dev/auto" NGPU=2 EXTRA="-b 8 -e 1G -f 2 -n 10 -w 3" \
  timeout ${LIMIT:-150} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
.dev/ccl-report $O/sweep/nccltests --base nccl --lib ccl --plot $O/nccl-tests-x2.png --plot $O/nccl-tests-x2.svg > $O/sweep.md 2>&1
cat $O/sweep/nccltests/exits.txt >> $O/sweep.md
cd $O && tar czf logs.tgz sweep && rm -rf sweep
