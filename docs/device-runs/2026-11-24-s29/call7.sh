# Session 29 call 7 (nvidia-h100-x1, carry .dev as call 6): what call 6 found.
# a) the uneven all-reduce's last element, avg / premulsum, wrong on ranks 0 and 2: is it
#    cuda-ipc's two-rank all-reduce of one element with a scaling (one host, two ranks)?
# b) sendrecv between the ranks of one host over the host's communicator: ~8 ms whatever the
#    size below 64 MiB. Against: the same pairs with all four ranks on one host (cuda-ipc on
#    the whole communicator, no hierarchy), and two ranks alone; and the hierarchical run with
#    NCCL_DEBUG=INFO (cuda-ipc's host-wait counters)
set -u; O=$OUT/r; mkdir -p $O
cat > /tmp/alt.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK % 2))
exec "$@"
W
chmod +x /tmp/alt.sh
run() { # log np wrapper env-words... -- ccl-perf args
  local log=$1 np=$2 wrap=$3; shift 3; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env NCCL_NVLS_ENABLE=0 "${envs[@]}" LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 150 mpirun --allow-run-as-root \
    --bind-to none -np $np -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH $(env "${envs[@]}" env | grep -oE '^(CCL|NCCL)_[A-Z0-9_]+' | sed 's/^/-x /') \
    $wrap .dev/ccl-perf "$@" --mem device > $O/$log.txt 2>&1
  echo "$log rc $?: rows $(grep -cE '^ +[0-9]' $O/$log.txt), wrong $(grep -E '^ +[0-9]' $O/$log.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}')"
  grep -E '^ +[0-9]' $O/$log.txt | awk '{printf "%s:%s/%s ", $1, $6, $10} END {print ""}'
}
run ar-two-tiny-check 2 "" CCL_NONE=1 -- all_reduce -b 4 -e 20 -i 4 -n 2 -w 1 -c 1 -d float,int32 -o avg,mulsum,sum
run ar-four-tiny-check 4 "" CCL_NONE=1 -- all_reduce -b 4 -e 20 -i 4 -n 2 -w 1 -c 1 -d float -o avg,mulsum
run sr-two 2 "" CCL_NONE=1 -- sendrecv -b 1M -e 128M -f 4 -n 10 -w 2 -c 1
run sr2-onehost 4 "" CCL_NONE=1 -- sendrecv -b 1M -e 128M -f 4 -n 10 -w 2 -c 1 -r 2
run sr2-hier 4 /tmp/alt.sh CCL_NONE=1 -- sendrecv -b 1M -e 128M -f 4 -n 10 -w 2 -c 1 -r 2
run sr2-hier-info 4 /tmp/alt.sh NCCL_DEBUG=INFO -- sendrecv -b 8M -e 8M -n 20 -w 2 -c 1 -r 2
cd $OUT && tar czf logs.tgz r && rm -rf r
