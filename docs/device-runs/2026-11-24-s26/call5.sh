# Call 5: small operations over the network path, GPU memory (staged) against host memory, two
# ranks on the one H100, us per operation (8 B .. 1 MiB), two alternated rounds.
set -u; O=$OUT
for r in 1 2; do for mem in host device; do for op in all_reduce sendrecv broadcast; do
  log=/tmp/s.$r.$mem.$op.log
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 \
    mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET -x LD_LIBRARY_PATH \
    .dev/ccl-perf $op -b 8 -e 1M -f 8 -n 500 -w 50 -c 1 --mem $mem > $log 2>&1
  grep -E '^ +[0-9]' $log | awk -v t="$r $mem $op" '{ w += $9; printf "%s%s:%s", (n++ ? " " : t ": "), $1, $6 } END { printf "  wrong %d\n", w }'
done; done; done | tee $O/5-small-host-device.txt
