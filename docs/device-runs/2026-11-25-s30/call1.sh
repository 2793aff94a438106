# Session 30 call 1 (nvidia-h100-x1, carry .dev = release build of the hierarchical
# gather/scatter commit): four ranks as processes on the one H100, two emulated hosts (ranks
# 0,1 and 2,3: CCL_HOSTID).
# 1) checked: gather and scatter, every root, 4 B - 20 MiB, float and int8
# 2) gather / scatter 8-128 MiB hierarchical (defaults) against flat (CCL_HIERARCHY=0), two
#    alternated rounds; all_reduce 128 MiB once each as a control against session 29
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
run gather-check 4 /tmp/pairs.sh CCL_NONE=1 -- gather -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8 -r all
run scatter-check 4 /tmp/pairs.sh CCL_NONE=1 -- scatter -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8 -r all
run gather-trace 4 /tmp/pairs.sh NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=ALL -- gather -b 8M -e 8M -n 1 -w 0 -c 1
echo "gather-trace: $(grep -c 'goes hierarchically' $O/gather-trace.txt) lines saying hierarchically"
for round in 1 2; do
  for op in gather scatter; do
    run $op-hier-$round 4 /tmp/pairs.sh CCL_NONE=1 -- $op -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
    run $op-flat-$round 4 /tmp/pairs.sh CCL_HIERARCHY=0 -- $op -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
  done
done
run ar-hier 4 /tmp/pairs.sh CCL_NONE=1 -- all_reduce -b 128M -e 128M -n 8 -w 2 -c 1
run ar-flat 4 /tmp/pairs.sh CCL_HIERARCHY=0 -- all_reduce -b 128M -e 128M -n 8 -w 2 -c 1
cd $OUT && tar czf logs.tgz r && rm -rf r
