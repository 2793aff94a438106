#!/usr/bin/env bash
# Host time per call: NVIDIA's nccl-tests with -C 1 (the time column is then the host time to
# issue one operation, not its completion), nine-op subset, libccl under several settings and
# NVIDIA NCCL beside it where it can run (two GPUs: NGPU=2; on one GPU set NCCL_TESTS_DEVICE=0,
# libccl only). NCCL_DEBUG=INFO makes each libccl rank print at destroy where its host time
# went (cuda-ipc "queued N groups in X ms ...; prepared and locked, posted, settled and begun,
# emitted and ended"). Summary in $OUT/host_cost.md.
#
#   NGPU=2 tests/gpu/device_host_cost.sh
#   NGPU=2 NCCL_TESTS_DEVICE=0 LIBS="default=.dev mailed=.dev" tests/gpu/device_host_cost.sh
# MPS=1 runs the processes under an MPS daemon of this script's own (started here, quit at the
# end): ranks sharing one GPU then run side by side instead of in time slices, so the GPU keeps
# up with the host and a full stream queue does not pass for host time. SIZES="64K 4M" measures
# each size on its own (the phase lines are then per size); default: one sweep 8 B - 16 MiB.
# CYCLES=N runs N synchronised cycles of the 200 calls (nccl-tests -N): the stream's queue then
# never fills, so a call's time is the host's even where the GPU takes longer per operation.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/host_cost.md; : > "$S"
LIB=${LIB:-.dev}; NGPU=${NGPU:-2}
OPS=${OPS:-all_gather reduce_scatter all_reduce alltoall broadcast sendrecv}
if [ -n "${NCCL_TESTS_DEVICE:-}" ]; then
  LIBS=${LIBS:-"default=$LIB mailed=$LIB conn1=$LIB"}
else
  LIBS=${LIBS:-"nccl default=$LIB mailed=$LIB conn1=$LIB"}
fi
export ENVS_default="NCCL_DEBUG=INFO"
export ENVS_mailed="NCCL_DEBUG=INFO CCL_IPC_MAILED_PUSH=1"
export ENVS_conn1="NCCL_DEBUG=INFO CUDA_DEVICE_MAX_CONNECTIONS=1"
source tests/gpu/mps.sh
echo "tools: $(for t in nsys perf nvidia-cuda-mps-control; do command -v $t >/dev/null && echo -n "$t "; done)" | tee -a "$S"
for size in ${SIZES:-sweep}; do
  range="-b 8 -e 16M -f 8"; [ "$size" = sweep ] || range="-b $size -e $size"
  D=$OUT/ab-$size
  OUT=$D LIBS="$LIBS" EXTRA="-C 1 $range -n 200 -w 20 ${CYCLES:+-N $CYCLES}" OPS="$OPS" NGPU=$NGPU \
    bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
  echo "## $size: host time per call, nccl-tests -C 1 (a 'busbw' ratio above 1 is less host time than the first library)" | tee -a "$S"
  cat "$D/nccltests.md" >> "$S"
  echo "## $size: host us per call, out of place, per size; libccl's phase lines" | tee -a "$S"
  for op in $OPS; do
    for e in $LIBS; do
      n=${e%%=*}
      f=$D/nccltests/$op.$n.1.log
      [ -f "$f" ] || continue
      echo "$op $n: $(grep -aE '^ +[0-9]+ +[0-9]+ ' "$f" | awk '{printf "%s:%s ", $1, $6}')" | tee -a "$S"
      grep -ah "cuda-ipc queued .* groups" "$f" | grep -v "queued 2 groups" | sed 's/.*rank/  rank/' | head -n 2 | tee -a "$S"
    done
  done
done
