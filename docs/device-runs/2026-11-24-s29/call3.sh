# Session 29 call 3 (nvidia-h100-x1, carry .dev as call 2): is the GPU fold's cost of call 2
# (hierarchical all-reduce, cross stage folded: ~15 ms at any size) the fold's own?
# Two ranks as processes on the one GPU, each its own emulated host (the network path, mpt),
# all_reduce 1-64 MiB, GPU fold at every size (=1) against off (=0); then four ranks on two
# emulated hosts, hierarchical, fold at every size, with CCL_GPU_STREAM_PIECE_BYTES=0 (no
# stream pieces), and with the ranks' proxies traced (NCCL_DEBUG=INFO, rank 0's log kept).
set -u; O=$OUT/r; mkdir -p $O
cat > /tmp/hostwrap.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK / ${PER:-2}))
exec "$@"
W
chmod +x /tmp/hostwrap.sh
run() { # log np wrapper env-words... -- ccl-perf args
  local log=$1 np=$2 wrap=$3; shift 3; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env NCCL_NVLS_ENABLE=0 "${envs[@]}" LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 mpirun --allow-run-as-root \
    --bind-to none -np $np -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH $(env "${envs[@]}" env | grep -oE '^(CCL|NCCL|PER)_?[A-Z0-9_]*' | sed 's/^/-x /') \
    $wrap .dev/ccl-perf "$@" --mem device > $O/$log.txt 2>&1
  echo "$log rc $?: rows $(grep -cE '^ +[0-9]' $O/$log.txt), wrong $(grep -E '^ +[0-9]' $O/$log.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}'), $(grep -E '^ +[0-9]' $O/$log.txt | awk '{printf "%s:%s/%s ", $1, $6, $10}')"
}
run two-fold1 2 /tmp/hostwrap.sh PER=1 CCL_GPU_FOLD_BYTES=1 -- all_reduce -b 1M -e 64M -f 4 -n 8 -w 2 -c 1
run two-fold0 2 /tmp/hostwrap.sh PER=1 CCL_GPU_FOLD_BYTES=0 -- all_reduce -b 1M -e 64M -f 4 -n 8 -w 2 -c 1
run two-sendrecv 2 /tmp/hostwrap.sh PER=1 -- sendrecv -b 1M -e 64M -f 4 -n 8 -w 2 -c 1
run hier-fold1-nopieces 4 /tmp/hostwrap.sh CCL_GPU_FOLD_BYTES=1 CCL_GPU_STREAM_PIECE_BYTES=0 -- all_reduce -b 1M -e 64M -f 4 -n 8 -w 2 -c 1
run hier-fold1-info 4 /tmp/hostwrap.sh CCL_GPU_FOLD_BYTES=1 NCCL_DEBUG=INFO -- all_reduce -b 1M -e 1M -n 20 -w 2 -c 1
run hier-fold0 4 /tmp/hostwrap.sh CCL_GPU_FOLD_BYTES=0 -- all_reduce -b 1M -e 64M -f 4 -n 8 -w 2 -c 1
cd $OUT && tar czf logs.tgz r && rm -rf r
