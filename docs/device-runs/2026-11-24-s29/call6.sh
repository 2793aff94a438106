# Session 29 call 6 (nvidia-h100-x1, carry .dev = the working tree after sends and receives
# between ranks of one host go on the host's communicator, release): four ranks as processes on
# the one H100, two emulated hosts.
# 1) hosts a,b,a,b (CCL_HOSTID = rank % 2): sendrecv -r 2 (every rank with the other rank of its
#    host), checked, then 8-128 MiB hierarchical (default) against flat, two alternated rounds;
#    sendrecv -r 1 (every rank sends across the hosts) the same; reduce_scatter (hosts' ranks
#    not consecutive: flat) checked
# 2) hosts a,a,b,b: all_reduce of counts below and just above a host's ranks (1-5 elements) and
#    uneven ones, every type x reduction, checked
set -u; O=$OUT/r; mkdir -p $O
cat > /tmp/alt.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK % 2))
exec "$@"
W
cat > /tmp/pairs.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK / 2))
exec "$@"
W
chmod +x /tmp/alt.sh /tmp/pairs.sh
run() { # log np wrapper env-words... -- ccl-perf args
  local log=$1 np=$2 wrap=$3; shift 3; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env NCCL_NVLS_ENABLE=0 "${envs[@]}" LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 150 mpirun --allow-run-as-root \
    --bind-to none -np $np -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH $(env "${envs[@]}" env | grep -oE '^(CCL|NCCL)_[A-Z0-9_]+' | sed 's/^/-x /') \
    $wrap .dev/ccl-perf "$@" --mem device > $O/$log.txt 2>&1
  echo "$log rc $?: rows $(grep -cE '^ +[0-9]' $O/$log.txt), wrong $(grep -E '^ +[0-9]' $O/$log.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}')"
  case $log in *check*) ;; *) grep -E '^ +[0-9]' $O/$log.txt | awk '{printf "%s:%s/%s ", $1, $8, $12} END {print ""}' ;; esac
}
run sr2-check 4 /tmp/alt.sh CCL_NONE=1 -- sendrecv -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8,bfloat16 -r 2
run sr1-check 4 /tmp/alt.sh CCL_NONE=1 -- sendrecv -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int8 -r 1
run rs-alt-check 4 /tmp/alt.sh CCL_NONE=1 -- reduce_scatter -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,int32 -o sum,avg
run ar-small-check 4 /tmp/pairs.sh CCL_NONE=1 -- all_reduce -b 4 -e 20 -i 4 -n 2 -w 1 -c 1 -d all -o all
run ar-uneven-check 4 /tmp/pairs.sh CCL_NONE=1 -- all_reduce -b 4 -e 20M -f 7 -n 2 -w 1 -c 1 -d float,bfloat16,int32,int8 -o sum,avg,max
for round in 1 2; do
  run sr2-hier-$round 4 /tmp/alt.sh CCL_NONE=1 -- sendrecv -b 8M -e 128M -f 4 -n 10 -w 2 -c 1 -r 2
  run sr2-flat-$round 4 /tmp/alt.sh CCL_HIERARCHY=0 -- sendrecv -b 8M -e 128M -f 4 -n 10 -w 2 -c 1 -r 2
  run sr1-hier-$round 4 /tmp/alt.sh CCL_NONE=1 -- sendrecv -b 8M -e 128M -f 4 -n 10 -w 2 -c 1 -r 1
  run sr1-flat-$round 4 /tmp/alt.sh CCL_HIERARCHY=0 -- sendrecv -b 8M -e 128M -f 4 -n 10 -w 2 -c 1 -r 1
done
cd $OUT && tar czf logs.tgz r && rm -rf r
