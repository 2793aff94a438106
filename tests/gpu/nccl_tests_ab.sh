#!/usr/bin/env bash
# NVIDIA's nccl-tests, the nine ops under mpirun, once per library, in one device call:
# busbw and #wrong per size, then ratios against the first library (summary under $OUT).
#
#   LIBS="nccl=/path/to/nvidia/lib old=.dev/old new=.dev/new" NGPU=2 tests/gpu/nccl_tests_ab.sh
#
# Each LIBS entry is name=directory holding libnccl.so.2; "nccl" with no directory means
# NVIDIA's NCCL of the PyTorch wheel. nccl-tests' source must lie in .dev/nccl-tests (fetched
# from NVIDIA/nccl-tests); it is built here unless .dev/nccl-tests/build exists. REPS runs
# every library that many times, interleaved (old, new, new, old, ...), to see run-to-run spread.
# Sizes: -b 8 -e 512M -f 4 (8 B, ..., 2 MiB, ..., 128 MiB, 512 MiB); EXTRA adds flags (-G 5).
# On a machine with fewer GPUs than ranks, NCCL_TESTS_DEVICE=0 puts every rank on GPU 0 (libccl
# allows that, NVIDIA's NCCL does not: leave "nccl" out of LIBS there); CUDA_DEVICE_MAX_CONNECTIONS
# and CUDA_MPS_PIPE_DIRECTORY (tests/gpu/mps.sh) are passed on when set. ENVS_<name>="VAR=value ..." sets variables for that library's runs only
# (say new=.dev/new nowait=.dev/new with ENVS_nowait="CCL_IPC_PUSH_WAIT_US=0 ...").
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; L=$OUT/nccltests; mkdir -p "$L"
NGPU=${NGPU:-2}; REPS=${REPS:-1}
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
OPS=${OPS:-all_reduce all_gather broadcast reduce_scatter reduce alltoall gather scatter sendrecv}
LIBS=${LIBS:-nccl old=.dev/old new=.dev/new}

bash tests/gpu/nccl_tests_build.sh "$L" || exit 1
# Even repetitions run the libraries in reverse order: a call's host speed drifts (on
# 2026-11-30 NCCL's 8 - 128 KiB gathers took 40% longer in the second repetition than in the
# first, bd00519's 15-20%), which would otherwise favour whichever library runs first.
reversed=$(for e in $LIBS; do echo "$e"; done | tac | tr '\n' ' ')
for rep in $(seq 1 "$REPS"); do
  order=$LIBS; [ $((rep % 2)) = 0 ] && order=$reversed
  for op in $OPS; do
    for entry in $order; do
      name=${entry%%=*}; dir=${entry#*=}
      [ "$name" = "$entry" ] && dir=$NV/lib
      case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
      [ -e "$dir/libnccl.so" ] || ln -sf libnccl.so.2 "$dir/libnccl.so" 2>/dev/null
      envs_var=ENVS_$name; envs=${!envs_var:-}
      fwd=$(for kv in $envs; do printf -- '-x %s ' "${kv%%=*}"; done)
      env $envs LD_LIBRARY_PATH=$dir timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np "$NGPU" \
        -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE $fwd ${NCCL_TESTS_DEVICE:+-x NCCL_TESTS_DEVICE} \
        ${CUDA_DEVICE_MAX_CONNECTIONS:+-x CUDA_DEVICE_MAX_CONNECTIONS} \
        ${CUDA_MPS_PIPE_DIRECTORY:+-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY} .dev/nccl-tests/build/${op}_perf \
        -b 8 -e 512M -f 4 -c 1 ${EXTRA:-} > "$L/$op.$name.$rep.log" 2>&1
      echo "$op $name rep $rep exit $?" >> "$L/exits.txt"
    done
  done
done
python3 tests/gpu/nccl_tests_table.py "$L" $(for e in $LIBS; do echo "${e%%=*}"; done) | tee "$OUT/nccltests.md"
