# Call 3: peers whose GPU memory cannot be mapped fall back to host-only (CCL_IPC_HOST_ONLY=auto),
# exercised with CCL_IPC_FAULT_NO_PEER_ACCESS=1 on this GPU (which has peer access); P2P on.
# Then the one-GPU regression round with the defaults (attach was restructured).
set -u; O=$OUT
export LD_LIBRARY_PATH=$PWD/.dev
X="-x LD_LIBRARY_PATH -x CCL_IPC_HOST_ONLY -x CCL_IPC_FAULT_NO_PEER_ACCESS -x NCCL_DEBUG"
rows() { grep -E '^ +[0-9]' "$1" | awk -v t="$2" '{ w += $9; if ($13 != "N/A") w += $13; n++; last = $1 ":" $8 "/" $12 } END { printf "%s: %d rows, wrong %d, last %s\n", t, n, w, last }'; }
{
for np in 2 3; do
  for op in all_reduce all_gather alltoall sendrecv broadcast reduce_scatter; do
    CCL_IPC_FAULT_NO_PEER_ACCESS=1 NCCL_DEBUG=INFO timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np $np $X \
      .dev/ccl-perf $op -b 8 -e 128M -f 16 -n 5 -w 1 -c 1 --mem device -d float,int8 > /tmp/f.$np.$op.log 2>&1; rc=$?
    rows /tmp/f.$np.$op.log "no peer access np $np $op (exit $rc)"
  done
  sed 's/\x1b\[[0-9;]*m//g' /tmp/f.$np.all_reduce.log | grep -oE 'cuda-ipc: a rank cannot map[^;]*; host-only instead|cuda-ipc host path on' | sort | uniq -c
done
CCL_IPC_HOST_ONLY=0 CCL_IPC_FAULT_NO_PEER_ACCESS=1 NCCL_DEBUG=INFO timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 $X \
  .dev/ccl-perf sendrecv -b 128M -e 128M -n 5 -w 1 -c 1 --mem device > /tmp/f.off.log 2>&1
rows /tmp/f.off.log "no peer access, CCL_IPC_HOST_ONLY=0 (staged)"
grep -c "host-only instead" /tmp/f.off.log
CCL_IPC_FAULT_NO_PEER_ACCESS=1 CUDA_DEVICE_MAX_CONNECTIONS=32 timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 1 $X \
  .dev/ccl-perf all_reduce -g 2 -b 8 -e 16M -f 16 -n 3 -w 1 -c 1 > /tmp/f.g2.log 2>&1
rows /tmp/f.g2.log "no peer access -g 2 (one process, staged by the guard) all_reduce (exit $?)"
} 2>&1 | tee $O/3-no-peer-access.txt
( OUT=/tmp/o RUNS=3 bash tests/gpu/device_one_gpu.sh > /tmp/round.log 2>&1 )
cp /tmp/o/summary.md $O/3-round-defaults-summary.md
grep -vE ': exit 0, [0-9]+ rows, 0 wrong' $O/3-round-defaults-summary.md
grep -cE ': exit 0, [0-9]+ rows, 0 wrong' $O/3-round-defaults-summary.md
