#!/usr/bin/env bash
# Eager sends (CCL_IPC_EAGER_SEND=1: a send posted before its receive goes through the
# receiver's slots from CCL_IPC_EAGER_MIN_BYTES on, smaller ones are pulled; no host wait;
# eager0: from 0 bytes) against the push wait (=0, the behaviour before), one
# build, beside NVIDIA NCCL in one nvidia-h200-x2 call (carry .dev: .dev/new the build,
# .whl for Megatron, .dev/nccl-tests):
#   MODE=nccl      nccl-tests, the six ops with direct transfers, 8 B - 1 GiB, 0 wrong expected
#   MODE=megatron  Megatron-core tp2-sp and pp2-1f1b, micro-batch 2, NCCL_DEBUG=INFO: host
#                  time in libccl's calls and what the sends posted first did
#   MODE=both      both, nccl-tests first
set -uo pipefail
O=${OUT:-/tmp/out}
nccl() {
  export ENVS_eager=CCL_IPC_EAGER_SEND=1 ENVS_wait=CCL_IPC_EAGER_SEND=0 \
    ENVS_eager0="CCL_IPC_EAGER_SEND=1 CCL_IPC_EAGER_MIN_BYTES=0"
  OUT=$O/nt OPS="sendrecv all_gather alltoall broadcast gather scatter" NGPU=2 \
    EXTRA="-b 8 -e 1G -f 4 -n 20 -w 5" LIBS="nccl eager=.dev/new eager0=.dev/new wait=.dev/new" \
    timeout ${LIMIT:-200} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
  for n in eager eager0 wait; do
    echo "## $n / nccl"; .dev/ccl-report "$O/nt/nccltests" --base nccl --lib $n 2>&1 | grep -E "^\||wrong"
  done
  for n in eager eager0; do
    echo "## $n / wait"; .dev/ccl-report "$O/nt/nccltests" --base wait --lib $n 2>&1 | grep -E "^\||wrong"
  done
  (cd "$O" && tar czf nccl-logs.tgz nt && rm -rf nt)
}
megatron() {
  MICRO_BATCH=${MB:-2} LIBS="nccl ccl ccl-b" CONFIGS="tp2-sp pp2-1f1b" ITERS=${ITERS:-30} \
    LIBCCL=$PWD/.dev/new/libnccl.so.2 CCL_ENV="NCCL_DEBUG=INFO CCL_IPC_EAGER_SEND=1" \
    CCL_ENV_B="NCCL_DEBUG=INFO CCL_IPC_EAGER_SEND=0" DEADLINE=${DEADLINE:-330} OUT=$O/mg \
    bash tests/megatron/run.sh 2>&1 | tail -n 16
  grep -rE "sends posted before|queued [0-9]+ groups|direct reductions:" "$O/mg" 2>/dev/null \
    | sed -E "s|^$O/mg/||; s|:[^ ]* [^ ]* *(rank [0-9]+:)| \1|" > "$O/megatron-host.txt"
  wc -l < "$O/megatron-host.txt"
  (cd "$O" && tar czf megatron-logs.tgz mg && rm -rf mg)
}
case ${MODE:-both} in
  diag) ;;
  nccl) nccl > "$O/nccl.md" ;;
  megatron) megatron ;;
  both) nccl > "$O/nccl.md"; megatron ;;
esac
grep -E "median|lowest|wrong" "$O/nccl.md" 2>/dev/null
# MODE=diag: where an eager exchange loses (sendrecv, all_gather 8 - 512 MiB): eager from 0
# bytes with the default slots (4 x 8 MiB), with 16 x 2 MiB, with 8 x 8 MiB, and with two
# receive lanes, against the push wait.
if [ "${MODE:-}" = diag ]; then
  export ENVS_wait=CCL_IPC_EAGER_SEND=0 ENVS_e0="CCL_IPC_EAGER_SEND=1 CCL_IPC_EAGER_MIN_BYTES=0"
  export ENVS_e2m="$ENVS_e0 CCL_IPC_CHUNK_BYTES=2097152 CCL_IPC_SLOTS=16"
  export ENVS_e8s="$ENVS_e0 CCL_IPC_SLOTS=8" ENVS_erx="$ENVS_e0 CCL_IPC_RX_LANES=4"
  OUT=$O/diag OPS="sendrecv all_gather" NGPU=2 EXTRA="-b 8M -e 512M -f 4 -n 20 -w 5" \
    LIBS="nccl wait=.dev/new e0=.dev/new e2m=.dev/new e8s=.dev/new erx=.dev/new" \
    timeout ${LIMIT:-200} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
  for n in e0 e2m e8s erx; do
    echo "## $n / wait"; .dev/ccl-report "$O/diag/nccltests" --base wait --lib $n 2>&1 | grep -E "^\||wrong"
  done | tee "$O/diag.md"
  (cd "$O" && tar czf diag-logs.tgz diag && rm -rf diag)
fi
