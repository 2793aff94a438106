# Session 30 call 2 (nvidia-h100-x1, carry .dev = release build of the uneven-hosts commit):
# ranks as processes on the one H100, emulated hosts by CCL_HOSTID = rank / 2.
# 1) three ranks: hosts of two ranks and one (as after a shrink). Checked: all_reduce every
#    type x reduction (through each host's first rank), broadcast and reduce every root (roots
#    at index 0 hierarchical, rank 1 flat), all_gather (flat); then all_reduce 8-128 MiB
#    against flat (CCL_HIERARCHY=0), two alternated rounds
# 2) the one-GPU regression round (tests/gpu/device_one_gpu.sh, RUNS=2): cuda-ipc's schedule
#    was refactored (one helper for both directions)
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
  case $log in *check*) ;; *) grep -E '^ +[0-9]' $O/$log.txt | awk '{printf "%s:%s/%s ", $1, $8, $12} END {print ""}' ;; esac
}
run ar3-check 3 /tmp/pairs.sh CCL_NONE=1 -- all_reduce -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,bfloat16,int32,int8 -o all
run bcast3-check 3 /tmp/pairs.sh CCL_NONE=1 -- broadcast -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8 -r all
run reduce3-check 3 /tmp/pairs.sh CCL_NONE=1 -- reduce -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int32 -o sum,avg -r all
run ag3-check 3 /tmp/pairs.sh CCL_NONE=1 -- all_gather -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float
run ar3-trace 3 /tmp/pairs.sh NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=ALL -- all_reduce -b 8M -e 8M -n 1 -w 0 -c 1
echo "ar3-trace: $(grep -c 'goes hierarchically' $O/ar3-trace.txt) lines saying hierarchically; $(grep -o 'hierarchy: [0-9] ranks on this host (index [0-9]), [0-9] hosts' $O/ar3-trace.txt | sort | uniq -c | tr '\n' ';')"
for round in 1 2; do
  run ar3-hier-$round 3 /tmp/pairs.sh CCL_NONE=1 -- all_reduce -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
  run ar3-flat-$round 3 /tmp/pairs.sh CCL_HIERARCHY=0 -- all_reduce -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
done
cd $OUT && tar czf logs.tgz r && rm -rf r
cd - >/dev/null
RUNS=2 OUT=$OUT/one bash tests/gpu/device_one_gpu.sh > $OUT/round.txt 2>&1; echo "round rc $?"
cp $OUT/one/summary.md $OUT/summary.md; mv $OUT/one/one_gpu_logs.tgz $OUT/; rm -rf $OUT/one
echo "summary: $(grep -c PASS $OUT/summary.md) PASS lines, $(grep -c FAIL $OUT/summary.md) FAIL lines"
grep -E "FAIL|wrong [1-9]|failed [1-9]|[1-9][0-9]* wrong" $OUT/summary.md | head
