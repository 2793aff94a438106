# Session 28 call 3 (nvidia-h100-x1, carry .dev = the fold decided per operation, inside groups
# too, its transfers marked apart from the user's sends and receives): two ranks on the one H100
# over the network path (P2P and SHM off, mpt).
# 1) group_vs_lone.c with the defaults (fold on from 8 MiB: its 40 MiB all-reduce and reduce are
#    folded on both ranks, rank 0 alone, rank 1 in a group with a send to itself), and with
#    CCL_GPU_FOLD_BYTES=0; then the network path's check of all nine ops on GPU memory,
#    8 B - 128 MiB (fold at 16 and 128 MiB)
# 2) fold correctness again at every size (CCL_GPU_FOLD_BYTES=1): all_reduce / reduce_scatter /
#    reduce, float int32 bf16 x sum avg premulsum, in and out of place, 8 B - 32 MiB
# 3) all_reduce 128 MiB, ring vs fold, once (speed unchanged by the rework?)
set -u; O=$OUT
NETCHECK=0 bash tests/gpu/device_group_vs_lone.sh 2>&1 | tee $O/gvl.txt
CCL_GPU_FOLD_BYTES=0 NETCHECK=0 bash tests/gpu/device_group_vs_lone.sh 2>&1 | sed 's/^/fold off: /' | tee -a $O/gvl.txt
OUT=$O MAX=128M MEMS=device bash tests/gpu/device_net_check.sh 2>&1 | tail -n 10 | tee $O/netcheck.txt
net="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt NCCL_NVLS_ENABLE=0"
for op in all_reduce reduce_scatter reduce; do
  root=""; [ $op = reduce ] && root="-r all"
  env $net CCL_GPU_FOLD_BYTES=1 LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 150 \
    mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET \
    -x NCCL_NVLS_ENABLE -x CCL_GPU_FOLD_BYTES -x LD_LIBRARY_PATH .dev/ccl-perf $op -b 8 -e 32M -f 16 -n 2 -w 1 \
    -c 1 -d float,int32,bfloat16 -o sum,avg,mulsum $root --mem device > $O/check-$op.txt 2>&1
  echo "$op rc $?: rows $(grep -cE '^ +[0-9]' $O/check-$op.txt), wrong $(grep -E '^ +[0-9]' $O/check-$op.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}')"
done
OUT=$O/ar ROUNDS=1 MEMS=device OPS="all_reduce" RANGE="128M 128M" ARGS="-n 20 -w 3 -c 1" \
  SETS="ring:CCL_GPU_FOLD_BYTES=0 fold:" bash tests/gpu/device_net_ab.sh 2>&1 | tail -n 3
