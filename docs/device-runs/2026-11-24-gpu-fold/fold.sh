# 2026-11-24 (nvidia-h100-x1, carry .dev = the fold generalised: all-reduce, reduce-scatter
# and reduce, CCL_GPU_FOLD_BYTES default 8 MiB): two ranks as processes on the one H100 over the
# network path (P2P and SHM off, mpt).
# 1) correctness with CCL_GPU_FOLD_BYTES=1 (every size folded): reduce_scatter and reduce (every
#    root) x every type x every reduction, in and out of place, 8 B - 2 MiB; all_reduce float
#    at the defaults 1-64 MiB (the default window)
# 2) ring against fold (default): reduce_scatter and reduce 8-128 MiB, two rounds; all_reduce
#    128 MiB defaults against CCL_GPU_FOLD_BYTES=0 once more
set -u; O=$OUT
net="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt NCCL_NVLS_ENABLE=0"
chk() { # name env-words... -- ccl-perf args
  local name=$1; shift; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env $net "${envs[@]}" LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 200 \
    mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET \
    -x NCCL_NVLS_ENABLE -x CCL_GPU_FOLD_BYTES -x LD_LIBRARY_PATH .dev/ccl-perf "$@" --mem device > $O/check-$name.txt 2>&1
  echo "$name rc $?: rows $(grep -cE '^ +[0-9]' $O/check-$name.txt), wrong $(grep -E '^ +[0-9]' $O/check-$name.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}')"
}
chk rs CCL_GPU_FOLD_BYTES=1 -- reduce_scatter -b 8 -e 2M -f 64 -n 2 -w 1 -c 1 -d all -o all
chk reduce CCL_GPU_FOLD_BYTES=1 -- reduce -b 8 -e 2M -f 64 -n 2 -w 1 -c 1 -d all -o all -r all
chk ar-default CCL_NONE=1 -- all_reduce -b 1M -e 64M -f 4 -n 3 -w 1 -c 1 -d float,bfloat16,int32 -o sum,avg
OUT=$O/ab ROUNDS=2 MEMS=device OPS="reduce_scatter reduce" RANGE="8M 128M" FACTOR=4 ARGS="-n 20 -w 3 -c 1" \
  SETS="ring:CCL_GPU_FOLD_BYTES=0 fold:" bash tests/gpu/device_net_ab.sh > $O/ab.txt 2>&1
OUT=$O/ar ROUNDS=1 MEMS=device OPS="all_reduce sendrecv" RANGE="128M 128M" ARGS="-n 20 -w 3 -c 1" \
  SETS="ring:CCL_GPU_FOLD_BYTES=0 fold:" bash tests/gpu/device_net_ab.sh > $O/ar.txt 2>&1
cat $O/ab.txt $O/ar.txt
