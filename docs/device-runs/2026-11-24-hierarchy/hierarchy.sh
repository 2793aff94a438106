# 2026-11-24, nvidia-h100-x1 (carry .dev = HEAD 9e0281e release): four ranks as processes
# on the one H100, two emulated hosts (ranks 0,1 and 2,3 unless said).
# 1) checked, every type x reduction: all_reduce of 1-5 elements and uneven counts (the last
#    elements on the host's communicator, grouped there with the reduce-scatter: an earlier run had
#    avg / premulsum wrong), reduce_scatter, reduce every root; sendrecv with the host's other
#    rank (hosts a,b,a,b, -r 2)
# 2) all_reduce / reduce_scatter / reduce 8-128 MiB hierarchical (defaults: the cross stage
#    folded again) against flat, two alternated rounds
set -u; O=$OUT/r; mkdir -p $O
cat > /tmp/pairs.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK / 2))
exec "$@"
W
cat > /tmp/alt.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK % 2))
exec "$@"
W
chmod +x /tmp/pairs.sh /tmp/alt.sh
run() { # log np wrapper env-words... -- ccl-perf args
  local log=$1 np=$2 wrap=$3; shift 3; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env NCCL_NVLS_ENABLE=0 "${envs[@]}" LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 150 mpirun --allow-run-as-root \
    --bind-to none -np $np -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH $(env "${envs[@]}" env | grep -oE '^(CCL|NCCL)_[A-Z0-9_]+' | sed 's/^/-x /') \
    $wrap .dev/ccl-perf "$@" --mem device > $O/$log.txt 2>&1
  echo "$log rc $?: rows $(grep -cE '^ +[0-9]' $O/$log.txt), wrong $(grep -E '^ +[0-9]' $O/$log.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}')"
  case $log in *check*) ;; *) grep -E '^ +[0-9]' $O/$log.txt | awk '{printf "%s:%s/%s ", $1, $8, $12} END {print ""}' ;; esac
}
run ar-small-check 4 /tmp/pairs.sh CCL_NONE=1 -- all_reduce -b 4 -e 20 -i 4 -n 2 -w 1 -c 1 -d all -o all
run ar-uneven-check 4 /tmp/pairs.sh CCL_NONE=1 -- all_reduce -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,bfloat16,int32,int8 -o all
run rs-check 4 /tmp/pairs.sh CCL_NONE=1 -- reduce_scatter -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,bfloat16,int32 -o all
run reduce-check 4 /tmp/pairs.sh CCL_NONE=1 -- reduce -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int32 -o all -r all
run sr2-check 4 /tmp/alt.sh CCL_NONE=1 -- sendrecv -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8 -r 2
for round in 1 2; do
  for op in all_reduce reduce_scatter reduce; do
    run $op-hier-$round 4 /tmp/pairs.sh CCL_NONE=1 -- $op -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
    run $op-flat-$round 4 /tmp/pairs.sh CCL_HIERARCHY=0 -- $op -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
  done
done
cd $OUT && tar czf logs.tgz r && rm -rf r
