# Session 30 call 6 (nvidia-h100-x1, carry .dev = release build of the uneven-broadcast commit):
# ranks as processes on the one H100, emulated hosts by CCL_HOSTID = rank / 2. Checked, every
# root: broadcast on 3 ranks (2 + 1: root 1's index is missing on the second host, so it goes
# on the root's host, among the first ranks, then on the other host) and 5 ranks (2 + 2 + 1);
# reduce on 3 ranks (root 1 flat, 0 and 2 hierarchical); all_reduce and all_gather on 5 ranks.
set -u; O=$OUT/r; mkdir -p $O
cat > /tmp/pairs.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK / 2))
exec "$@"
W
chmod +x /tmp/pairs.sh
run() { # log np wrapper env-words... -- ccl-perf args
  local log=$1 np=$2 wrap=$3; shift 3; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env NCCL_NVLS_ENABLE=0 "${envs[@]}" LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 150 mpirun --allow-run-as-root \
    --bind-to none -np $np -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH $(env "${envs[@]}" env | grep -oE '^(CCL|NCCL)_[A-Z0-9_]+' | sed 's/^/-x /') \
    $wrap .dev/ccl-perf "$@" --mem device > $O/$log.txt 2>&1
  echo "$log rc $?: rows $(grep -cE '^ +[0-9]' $O/$log.txt), wrong $(grep -E '^ +[0-9]' $O/$log.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}')"
}
run bcast3-check 3 /tmp/pairs.sh CCL_NONE=1 -- broadcast -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8 -r all
run bcast5-check 5 /tmp/pairs.sh CCL_NONE=1 -- broadcast -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8 -r all
run reduce3-check 3 /tmp/pairs.sh CCL_NONE=1 -- reduce -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int32 -o sum,avg -r all
run ar5-check 5 /tmp/pairs.sh CCL_NONE=1 -- all_reduce -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,bfloat16,int32 -o all
run ag5-check 5 /tmp/pairs.sh CCL_NONE=1 -- all_gather -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8
run bcast3-trace 3 /tmp/pairs.sh NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=ALL -- broadcast -b 8M -e 8M -n 1 -w 0 -c 1 -r 1
echo "bcast3-trace: $(grep -c 'Broadcast { root: 1 }) of .* goes hierarchically' $O/bcast3-trace.txt) lines saying hierarchically"
cd $OUT && tar czf logs.tgz r && rm -rf r
