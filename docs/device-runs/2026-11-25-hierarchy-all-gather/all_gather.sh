# 2026-11-25 (nvidia-h100-x1, carry .dev = release build of the all-gather-over-any-hosts
# commit): ranks as processes on the one H100, emulated hosts by CCL_HOSTID = rank / 2.
# 1) checked all_gather: 3 ranks (hosts of 2 and 1: each block across to one rank of the other
#    host, on the communicator itself), 5 ranks (2, 2, 1), and 4 ranks (even: the cross stage
#    on the communicator across the hosts, the own block now copied on the host's links)
# 2) all_gather 8-128 MiB hierarchical against flat: 3 ranks and 4 ranks, two alternated rounds
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
  run ag$np-check $np /tmp/pairs.sh CCL_NONE=1 -- all_gather -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8,bfloat16
done
run ag3-trace 3 /tmp/pairs.sh NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=ALL -- all_gather -b 8M -e 8M -n 1 -w 0 -c 1
echo "ag3-trace: $(grep -c 'AllGather) of .* goes hierarchically' $O/ag3-trace.txt) lines saying hierarchically"
for round in 1 2; do
  for np in 3 4; do
    run ag$np-hier-$round $np /tmp/pairs.sh CCL_NONE=1 -- all_gather -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
    run ag$np-flat-$round $np /tmp/pairs.sh CCL_HIERARCHY=0 -- all_gather -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
  done
done
cd $OUT && tar czf logs.tgz r && rm -rf r
