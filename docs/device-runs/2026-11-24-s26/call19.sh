# Call 19: host-only cuda-ipc (CCL_IPC_HOST_ONLY=1) with NCCL_P2P_DISABLE=1 -- no peer access used
# at all -- against the staged path (P2P off, the default); two ranks under mpirun on the one GPU;
# every op checked, 8 B..128 MiB; then one hardware queue, then -g 2 in one process.
set -u; O=$OUT
export NCCL_P2P_DISABLE=1 LD_LIBRARY_PATH=$PWD/.dev
X="-x NCCL_P2P_DISABLE -x LD_LIBRARY_PATH -x CCL_IPC_HOST_ONLY -x NCCL_DEBUG -x CUDA_DEVICE_MAX_CONNECTIONS"
run() { # label op ho extra-args
  local label=$1 op=$2 ho=$3; shift 3
  CCL_IPC_HOST_ONLY=$ho NCCL_DEBUG=${DBG:-WARN} CUDA_DEVICE_MAX_CONNECTIONS=${MAXC:-8} timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 $X \
    .dev/ccl-perf $op -b 8 -e 128M -f 8 -n 8 -w 2 -c 1 --mem device "$@" > /tmp/h.$label.$op.log 2>&1
  echo "exit $?" >> /tmp/h.$label.$op.log
  grep -E '^ +[0-9]' /tmp/h.$label.$op.log | awk -v t="$label $op" '{ w += $9; if ($13 != "N/A") w += $13; printf "%s%s:%s", (n++ ? " " : t ": "), $1, $8 } END { printf "  wrong %d%s\n", w, n ? "" : " (no rows)" }'
}
{
DBG=INFO run host-only sendrecv 1
sed 's/\x1b\[[0-9;]*m//g' /tmp/h.host-only.sendrecv.log | grep -E 'cuda-ipc|host path|host-only' | sort -u | head -8
for op in alltoall all_gather broadcast gather scatter all_reduce reduce_scatter reduce; do run host-only $op 1; done
for op in sendrecv alltoall all_gather broadcast; do run staged $op 0; done
for op in sendrecv alltoall; do MAXC=1 run host-only-1q $op 1; done
for op in sendrecv alltoall all_gather broadcast all_reduce; do
  CCL_IPC_HOST_ONLY=1 timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 1 $X .dev/ccl-perf $op -g 2 -b 1000 -e 70000000 -f 9 -n 2 -w 1 -c 1 > /tmp/g2.$op.log 2>&1
  grep -E '^ +[0-9]' /tmp/g2.$op.log | awk -v t="host-only -g 2 $op" '{ w += $9; if ($13 != "N/A") w += $13; n++ } END { printf "%s: %d rows, wrong %d\n", t, n, w }'
done
grep -h 'exit' /tmp/h.*.log | sort | uniq -c
grep -l -iE 'error|fail|panick' /tmp/h.*.log /tmp/g2.*.log | head
} 2>&1 | tee $O/19-host-only.txt
