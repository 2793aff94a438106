#!/usr/bin/env bash
# Packed low-latency lines and the low-latency reduce on two H200s (nvidia-h200-x2), in one
# call: NVIDIA nccl-tests, nine ops 8 B - 16 MiB (-f 2, -n 50 -w 10, checking on), beside
# NVIDIA NCCL 2.28.9 and the build before (.dev/new): pk = the new build as it defaults
# (CCL_IPC_LL_PACK_BYTES=16384), pk0 = packed lines off (the low-latency reduce alone), pk64 =
# packed up to 64 KiB, pk2m = all-reduces and reduces on the kernel up to 2 MiB.
set -uo pipefail
O=${OUT:-/tmp/out}
export ENVS_pk0="CCL_IPC_LL_PACK_BYTES=0" ENVS_pk64="CCL_IPC_LL_PACK_BYTES=65536" \
  ENVS_pk2m="CCL_IPC_LL_BYTES=2097152"
OUT=$O/ab LIBS="nccl cur=.dev/new pk=.dev/pk pk0=.dev/pk pk64=.dev/pk pk2m=.dev/pk" NGPU=2 \
  EXTRA="-b 8 -e 16M -f 2 -n 50 -w 10" bash tests/gpu/nccl_tests_ab.sh > "$O/ab.txt" 2>&1
grep -v "exit 0" "$O/ab/nccltests/exits.txt"
grep -E "#wrong" "$O/ab/nccltests.md"
cd "$O" && tar czf pack-logs.tgz ab && rm -rf ab/nccltests
