# Session 29 call 4 (nvidia-h100-x1, carry .dev as call 2): the hierarchical operations' stage
# across the hosts folded on the GPU (default) or not (CCL_GPU_FOLD_BYTES=0, which on these
# runs changes only that stage: the host stages are cuda-ipc). Four ranks as processes on the
# one H100, two emulated hosts (ranks 0,1 and 2,3), GPU memory, two alternated rounds.
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
for round in 1 2; do
  for op in all_reduce reduce_scatter reduce; do
    run $op-fold-$round 4 /tmp/hostwrap.sh CCL_NONE=1 -- $op -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
    run $op-nofold-$round 4 /tmp/hostwrap.sh CCL_GPU_FOLD_BYTES=0 -- $op -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
  done
done
cd $OUT && tar czf logs.tgz r && rm -rf r
