# Call 6: why GPU-memory operations of 8-512 B over the network path take 250-290 us (4 KiB: 50):
# sendrecv and all_reduce, GPU memory, 8 B .. 32 KiB, one setting changed at a time.
set -u; O=$OUT
run() { # label op vars...
  local label=$1 op=$2; shift 2
  log=/tmp/s.$label.$op.log
  env NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt "$@" LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 \
    mpirun --allow-run-as-root --bind-to none -np 2 $(env CCL_NET=mpt NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 "$@" env | grep -oE '^(CCL|NCCL)_[A-Z0-9_]+' | sed 's/^/-x /') -x LD_LIBRARY_PATH \
    .dev/ccl-perf $op -b 8 -e 32K -f 8 -n 300 -w 30 -c 1 --mem device > $log 2>&1
  grep -E '^ +[0-9]' $log | awk -v t="$label $op" '{ w += $9; printf "%s%s:%s", (n++ ? " " : t ": "), $1, $6 } END { printf "  wrong %d%s\n", w, n ? "" : " no rows" }'
}
for op in sendrecv all_reduce; do
  run def $op
  run ack0 $op CCL_MPT_ACK_DELAY_US=0
  run inline0 $op CCL_MPT_INLINE_BYTES=0
  run eng1 $op CCL_MPT_ENGINES=1
  run tcp $op CCL_NET=socket
  run stream0 $op CCL_GPU_STREAM_PIECE_BYTES=0
done 2>&1 | tee $O/6-small-device-knobs.txt
run info sendrecv NCCL_DEBUG=INFO > /dev/null 2>&1; sed 's/\x1b\[[0-9;]*m//g' /tmp/s.info.sendrecv.log | grep -E 'executor|proxy|staged|GPU' | head -20 | tee -a $O/6-small-device-knobs.txt
