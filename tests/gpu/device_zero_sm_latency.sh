#!/usr/bin/env bash
# Issue 5's 8-byte latency with zero SMs, on the device machine (2 GPUs), beside NVIDIA NCCL:
#
#     bash tests/gpu/device_zero_sm_latency.sh
#
# For sendrecv, alltoall, all_gather, broadcast, gather and scatter, as `-g 2` and as
# `mpirun -np 2`: `ccl-perf OP -b 8 -e 8 -n 200 -w 20` with NVIDIA NCCL, with libccl's
# defaults (small operations as kernels) and with `CCL_IPC_LL_EXCHANGE_BYTES=0` (no kernel:
# copy engines and stream memory operations only), and, when CCL_B names a second build's
# folder (e.g. .dev/prev), that build with zero SMs too. One row per op and mode: us each,
# and zero-SM / NCCL (the target is <= 1.5).
#
# Needs .dev/ccl-perf and .dev/libnccl.so.2 carried. Logs under $OUT/lat/.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/zsm-out}
NV=${NV:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}
CCL=$PWD/.dev
CCL_B=${CCL_B:-}
OPS=${OPS:-"sendrecv alltoall all_gather broadcast gather scatter"}
MODES=${MODES:-"g2 mpi"}
mkdir -p "$OUT/lat"
libs="nccl ccl zsm"
[[ -n $CCL_B ]] && libs="$libs zsm-b"

run() { # op mode lib
    local op=$1 mode=$2 lib=$3 lp=$CCL ll=
    case $lib in
        nccl) lp=$NV ;;
        zsm) ll=0 ;;
        zsm-b) lp=$PWD/$CCL_B ll=0 ;;
    esac
    local log=$OUT/lat/$op.$mode.$lib.log
    if [[ $mode == g2 ]]; then
        env ${ll:+CCL_IPC_LL_EXCHANGE_BYTES=$ll} LD_LIBRARY_PATH=$lp timeout -s KILL 40 \
            .dev/ccl-perf "$op" -b 8 -e 8 -n 200 -w 20 -c 0 -g 2 >"$log" 2>&1
    else
        env ${ll:+CCL_IPC_LL_EXCHANGE_BYTES=$ll} LD_LIBRARY_PATH=$lp timeout -s KILL 40 \
            mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
            ${ll:+-x CCL_IPC_LL_EXCHANGE_BYTES} .dev/ccl-perf "$op" -b 8 -e 8 -n 200 -w 20 -c 0 \
            >"$log" 2>&1
    fi
}

# The out-of-place time column of ccl-perf's one data row.
time_us() { grep -E '^ +[0-9]' "$1" | tail -1 | awk '{print $6}'; }

printf '%-5s %-11s' mode op
for lib in $libs; do printf ' %9s' "$lib"; done
printf ' %10s\n' "zsm/nccl"
for op in $OPS; do
    for mode in $MODES; do
        printf '%-5s %-11s' "$mode" "$op"
        declare -A t=()
        for lib in $libs; do
            run "$op" "$mode" "$lib"
            t[$lib]=$(time_us "$OUT/lat/$op.$mode.$lib.log")
            printf ' %9s' "${t[$lib]:-fail}"
        done
        python3 -c 'import sys
try: print(" %10.2f" % (float(sys.argv[1]) / float(sys.argv[2])))
except Exception: print(" %10s" % "-")' "${t[zsm]:-x}" "${t[nccl]:-x}"
        unset t
    done
done
