# Session 28 call 5 (nvidia-h100-x1, carry .dev = the GPU fold for 3-8 ranks: all-reduce and
# reduce-scatter block by block): ranks as processes on the one H100, each its own host
# (CCL_HOSTID), so every link is the network path (mpt over loopback), GPU memory.
# 1) correctness, every size folded (CCL_GPU_FOLD_BYTES=1): 3 ranks all_reduce and
#    reduce_scatter, 4 ranks all_reduce, every type x reduction, 12 B - 12 MiB, in/out of place
# 2) ring (CCL_GPU_FOLD_BYTES=0) against fold (default: blocks of 8 MiB and up), 48 / 192 MiB
set -u; O=$OUT
cat > /tmp/ownhost.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$OMPI_COMM_WORLD_RANK
exec "$@"
W
chmod +x /tmp/ownhost.sh
run() { # log np env-words... -- ccl-perf args
  local log=$1 np=$2; shift 2; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env NCCL_NVLS_ENABLE=0 "${envs[@]}" LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 mpirun --allow-run-as-root \
    --bind-to none -np $np -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH $(env "${envs[@]}" env | grep -oE '^(CCL|NCCL)_[A-Z0-9_]+' | sed 's/^/-x /') \
    /tmp/ownhost.sh .dev/ccl-perf "$@" --mem device > $O/$log.txt 2>&1
  echo "$log rc $?: rows $(grep -cE '^ +[0-9]' $O/$log.txt), wrong $(grep -E '^ +[0-9]' $O/$log.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}'), $(grep -E '^ +[0-9]' $O/$log.txt | tail -n 2 | awk '{printf "%s:%s/%s ", $1, $8, $12}')"
}
run check-ar3 3 CCL_GPU_FOLD_BYTES=1 -- all_reduce -b 12 -e 12M -f 32 -n 2 -w 1 -c 1 -d all -o all
run check-rs3 3 CCL_GPU_FOLD_BYTES=1 -- reduce_scatter -b 12 -e 12M -f 32 -n 2 -w 1 -c 1 -d float,int32,bfloat16,int8 -o all
run check-ar4 4 CCL_GPU_FOLD_BYTES=1 -- all_reduce -b 12 -e 12M -f 32 -n 2 -w 1 -c 1 -d float,int32,bfloat16 -o sum,avg,max,mulsum
for np in 3 4; do
  run ring-ar$np $np CCL_GPU_FOLD_BYTES=0 -- all_reduce -b 48M -e 192M -f 4 -n 8 -w 2 -c 1
  run fold-ar$np $np CCL_NONE=1 -- all_reduce -b 48M -e 192M -f 4 -n 8 -w 2 -c 1
done
run ring-rs3 3 CCL_GPU_FOLD_BYTES=0 -- reduce_scatter -b 48M -e 192M -f 4 -n 8 -w 2 -c 1
run fold-rs3 3 CCL_NONE=1 -- reduce_scatter -b 48M -e 192M -f 4 -n 8 -w 2 -c 1
