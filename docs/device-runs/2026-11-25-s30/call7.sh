# Session 30 call 7 (nvidia-h100-x1, carry .dev = release build of the uneven-reduce commit):
# ranks as processes on the one H100, emulated hosts by CCL_HOSTID = rank / 2. Checked, every
# root and reduction: reduce on 3 ranks (2 + 1: root 1's index is missing on the second host,
# so it reduces to each host's first rank, among those to rank 0, which sends it to rank 1),
# 5 ranks (2 + 2 + 1) and 4 ranks (even); then reduce 8-128 MiB to root 1 on 3 ranks,
# hierarchical against flat, two alternated rounds.
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
  run reduce$np-check $np /tmp/pairs.sh CCL_NONE=1 -- reduce -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int32,bfloat16 -o all -r all
done
run reduce3-trace 3 /tmp/pairs.sh NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=ALL -- reduce -b 8M -e 8M -n 1 -w 0 -c 1 -r 1
echo "reduce3-trace: $(grep -c 'Reduce { root: 1 }) of .* goes hierarchically' $O/reduce3-trace.txt) lines saying hierarchically"
for round in 1 2; do
  run reduce3-hier-$round 3 /tmp/pairs.sh CCL_NONE=1 -- reduce -b 8M -e 128M -f 4 -n 8 -w 2 -c 1 -r 1
  run reduce3-flat-$round 3 /tmp/pairs.sh CCL_HIERARCHY=0 -- reduce -b 8M -e 128M -f 4 -n 8 -w 2 -c 1 -r 1
done
cd $OUT && tar czf logs.tgz r && rm -rf r
