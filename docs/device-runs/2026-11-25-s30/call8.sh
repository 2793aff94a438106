# Session 30 call 8 (nvidia-h100-x1, carry .dev = release build of the uneven gather/scatter
# commit): ranks as processes on the one H100, emulated hosts by CCL_HOSTID = rank / 2.
# Checked, every root: gather and scatter on 3 ranks (2 + 1) and 5 ranks (2 + 2 + 1), each
# host's blocks at the root's index modulo its ranks; 4 ranks (even) again; then gather and
# scatter 8-128 MiB to / from root 1 on 3 ranks, hierarchical against flat, two rounds.
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
for np in 3 5 4; do
  for op in gather scatter; do
    run $op$np-check $np /tmp/pairs.sh CCL_NONE=1 -- $op -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8 -r all
  done
done
run gather3-trace 3 /tmp/pairs.sh NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=ALL -- gather -b 8M -e 8M -n 1 -w 0 -c 1 -r 1
echo "gather3-trace: $(grep -c 'Gather { root: 1 }) of .* goes hierarchically' $O/gather3-trace.txt) lines saying hierarchically"
for round in 1 2; do
  for op in gather scatter; do
    run ${op}3-hier-$round 3 /tmp/pairs.sh CCL_NONE=1 -- $op -b 8M -e 128M -f 4 -n 8 -w 2 -c 1 -r 1
    run ${op}3-flat-$round 3 /tmp/pairs.sh CCL_HIERARCHY=0 -- $op -b 8M -e 128M -f 4 -n 8 -w 2 -c 1 -r 1
  done
done
cd $OUT && tar czf logs.tgz r && rm -rf r
