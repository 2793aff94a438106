# Session 29 call 2 (nvidia-h100-x1, carry .dev = the working tree with hierarchical
# reduce-scatter and reduce, release): four ranks as processes on the one H100, two emulated
# hosts (CCL_HOSTID: ranks 0,1 and 2,3), GPU memory.
# 1) hierarchical reduce_scatter and reduce (every root): every type x reduction, checked
# 2) reduce_scatter / reduce 8-128 MiB hierarchical (default) against flat, two alternated rounds
# 3) the all-reduce dip of call 1 (16-64 MiB: ~20 ms where 8 MiB took 3.4): the same sweep with
#    the cross stage's GPU fold off (CCL_GPU_FOLD_BYTES=0), and with it on at every size (=1)
set -u; O=$OUT/r; mkdir -p $O
cat > /tmp/hostwrap.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK / 2))
exec "$@"
W
chmod +x /tmp/hostwrap.sh
run() { # log np wrapper env-words... -- ccl-perf args
  local log=$1 np=$2 wrap=$3; shift 3; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env NCCL_NVLS_ENABLE=0 "${envs[@]}" LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 mpirun --allow-run-as-root \
    --bind-to none -np $np -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH $(env "${envs[@]}" env | grep -oE '^(CCL|NCCL)_[A-Z0-9_]+' | sed 's/^/-x /') \
    $wrap .dev/ccl-perf "$@" --mem device > $O/$log.txt 2>&1
  echo "$log rc $?: rows $(grep -cE '^ +[0-9]' $O/$log.txt), wrong $(grep -E '^ +[0-9]' $O/$log.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}'), $(grep -E '^ +[0-9]' $O/$log.txt | awk '{printf "%s:%s/%s ", $1, $8, $12}')"
}
run rs-check 4 /tmp/hostwrap.sh CCL_NONE=1 -- reduce_scatter -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d all -o all
run reduce-check 4 /tmp/hostwrap.sh CCL_NONE=1 -- reduce -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,bfloat16,int32 -o all -r all
for round in 1 2; do
  run rs-hier-$round 4 /tmp/hostwrap.sh CCL_NONE=1 -- reduce_scatter -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
  run rs-flat-$round 4 /tmp/hostwrap.sh CCL_HIERARCHY=0 -- reduce_scatter -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
  run reduce-hier-$round 4 /tmp/hostwrap.sh CCL_NONE=1 -- reduce -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
  run reduce-flat-$round 4 /tmp/hostwrap.sh CCL_HIERARCHY=0 -- reduce -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
done
run ar-hier-nofold 4 /tmp/hostwrap.sh CCL_GPU_FOLD_BYTES=0 -- all_reduce -b 8M -e 128M -f 2 -n 8 -w 2 -c 1
run ar-hier-fold1 4 /tmp/hostwrap.sh CCL_GPU_FOLD_BYTES=1 -- all_reduce -b 1M -e 128M -f 2 -n 8 -w 2 -c 1
run ar-hier-default 4 /tmp/hostwrap.sh CCL_NONE=1 -- all_reduce -b 8M -e 128M -f 2 -n 8 -w 2 -c 1
cd $OUT && tar czf logs.tgz r && rm -rf r
