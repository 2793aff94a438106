# Session 29 call 1 (prepared in session 28 as its call 6, which had no device time left; nvidia-h100-x1,
# carry .dev = HEAD 8bd8591 release): four ranks as processes on the one H100, two emulated hosts
# (CCL_HOSTID: ranks 0,1 and 2,3), GPU memory, defaults (CCL_HIERARCHY=auto)
# 1) broadcast every root, all_reduce of uneven counts (sizes 4 x 7^k bytes), checked
# 2) broadcast 128 MiB hierarchical against flat, one round
# 3) NCCL_P2P_LEVEL=NVL and =LOC on one host (two ranks, one GPU): the same GPU is within NVL
#    (direct path, fast), LOC turns peer-to-peer off (host-only, ~20 GB/s): sendrecv 128 MiB
set -u; O=$OUT
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
  echo "$log rc $?: rows $(grep -cE '^ +[0-9]' $O/$log.txt), wrong $(grep -E '^ +[0-9]' $O/$log.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}'), $(grep -E '^ +[0-9]' $O/$log.txt | tail -n 1 | awk '{printf "%s:%s/%s ", $1, $8, $12}')"
}
run bcast-check 4 /tmp/hostwrap.sh CCL_NONE=1 -- broadcast -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8 -r all
run ag-check 4 /tmp/hostwrap.sh CCL_NONE=1 -- all_gather -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8,bfloat16
run ag-hier 4 /tmp/hostwrap.sh CCL_NONE=1 -- all_gather -b 128M -e 128M -n 8 -w 2 -c 1
run ag-flat 4 /tmp/hostwrap.sh CCL_HIERARCHY=0 -- all_gather -b 128M -e 128M -n 8 -w 2 -c 1
run ar-uneven 4 /tmp/hostwrap.sh CCL_NONE=1 -- all_reduce -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,bfloat16,int32 -o sum,max,avg
run bcast-hier 4 /tmp/hostwrap.sh CCL_NONE=1 -- broadcast -b 128M -e 128M -n 8 -w 2 -c 1
run bcast-flat 4 /tmp/hostwrap.sh CCL_HIERARCHY=0 -- broadcast -b 128M -e 128M -n 8 -w 2 -c 1
run level-nvl 2 "" NCCL_P2P_LEVEL=NVL -- sendrecv -b 128M -e 128M -n 10 -w 2 -c 1
run level-loc 2 "" NCCL_P2P_LEVEL=LOC -- sendrecv -b 128M -e 128M -n 10 -w 2 -c 1
# 4) all_reduce 8-128 MiB hierarchical against flat (session 28 saw 32 MiB below flat), and the
#    flat reduce_scatter / reduce baselines for the hierarchical ones to come
run ar-hier-sweep 4 /tmp/hostwrap.sh CCL_NONE=1 -- all_reduce -b 8M -e 128M -f 2 -n 8 -w 2 -c 1
run ar-flat-sweep 4 /tmp/hostwrap.sh CCL_HIERARCHY=0 -- all_reduce -b 8M -e 128M -f 2 -n 8 -w 2 -c 1
run rs-flat 4 /tmp/hostwrap.sh CCL_HIERARCHY=0 -- reduce_scatter -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
run reduce-flat 4 /tmp/hostwrap.sh CCL_HIERARCHY=0 -- reduce -b 8M -e 128M -f 4 -n 8 -w 2 -c 1
