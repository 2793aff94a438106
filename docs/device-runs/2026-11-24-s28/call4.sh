# Session 28 call 4 (nvidia-h100-x1, carry .dev = hierarchical all-reduce, CCL_HIERARCHY=auto):
# four ranks as processes on the one H100, two "hosts" (CCL_HOSTID: ranks 0,1 and 2,3), GPU
# memory: inside a host cuda-ipc, across the network path (mpt over loopback).
# 1) correctness: all_reduce float / bf16 / int32 x sum / avg / max / premulsum, 8 B - 32 MiB,
#    in and out of place, hierarchical (default) -- and a sweep of the other eight ops
# 2) hierarchical (default) against flat (CCL_HIERARCHY=0: everything staged), 8-128 MiB
set -u; O=$OUT
cat > /tmp/hostwrap.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK / 2))
exec "$@"
W
chmod +x /tmp/hostwrap.sh
run() { # log env-words... -- ccl-perf args
  local log=$1; shift; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env NCCL_NVLS_ENABLE=0 "${envs[@]}" LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 150 mpirun --allow-run-as-root \
    --bind-to none -np 4 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH $(env "${envs[@]}" env | grep -oE '^(CCL|NCCL)_[A-Z0-9_]+' | sed 's/^/-x /') \
    /tmp/hostwrap.sh .dev/ccl-perf "$@" --mem device > $O/$log.txt 2>&1
  echo "$log rc $?: rows $(grep -cE '^ +[0-9]' $O/$log.txt), wrong $(grep -E '^ +[0-9]' $O/$log.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}'), $(grep -E '^ +[0-9]' $O/$log.txt | awk '{printf "%s:%s/%s ", $1, $8, $12}')"
}
run check NCCL_DEBUG=INFO -- all_reduce -b 8 -e 32M -f 64 -n 2 -w 1 -c 1 -d float,bfloat16,int32 -o sum,avg,max,mulsum
grep -h "hierarchy:" $O/check.txt | sed 's/\x1b\[[0-9;]*m//g' | cut -c29- | sort | head -4
for op in all_gather reduce_scatter broadcast alltoall sendrecv; do
  run other-$op CCL_NONE=1 -- $op -b 8 -e 8M -f 64 -n 2 -w 1 -c 1
done
for r in 1 2; do
  run hier-$r CCL_NONE=1 -- all_reduce -b 8M -e 128M -f 4 -n 10 -w 2 -c 1
  run flat-$r CCL_HIERARCHY=0 -- all_reduce -b 8M -e 128M -f 4 -n 10 -w 2 -c 1
done
