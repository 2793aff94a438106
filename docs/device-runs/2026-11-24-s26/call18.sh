# Call 18: correctness with whole transfers through the cuda-ipc host path (1000 permille from 1
# byte): every op under mpirun (2 processes) and -g 2 (one process), 8 B .. 96 MiB by 4x plus odd
# sizes, all types for sendrecv/alltoall/all_gather/broadcast, checked; CUDA_DEVICE_MAX_CONNECTIONS=1 too.
set -u; O=$OUT
export CCL_IPC_HOST_PATH_PERMILLE=1000 CCL_IPC_HOST_PATH_EXCHANGE_PERMILLE=1000 CCL_IPC_HOST_PATH_MIN_BYTES=1 CCL_IPC_HOST_PATH_EXCHANGE_MIN_BYTES=1
X="-x CCL_IPC_HOST_PATH_PERMILLE -x CCL_IPC_HOST_PATH_EXCHANGE_PERMILLE -x CCL_IPC_HOST_PATH_MIN_BYTES -x CCL_IPC_HOST_PATH_EXCHANGE_MIN_BYTES -x LD_LIBRARY_PATH"
export LD_LIBRARY_PATH=$PWD/.dev
sum() { grep -E '^ +[0-9]' "$1" | awk -v t="$2" '{ w += $9; if ($13 != "N/A") w += $13; n++ } END { printf "%s: %d rows, wrong %d\n", t, n, w }'; }
{
for op in sendrecv alltoall all_gather broadcast gather scatter all_reduce reduce_scatter reduce; do
  timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 $X .dev/ccl-perf $op -b 8 -e 96M -f 4 -n 3 -w 1 -c 1 > /tmp/c.$op.log 2>&1; echo "exit $?" >> /tmp/c.$op.log
  sum /tmp/c.$op.log "mpirun $op 8B-96M"
  timeout -s KILL 120 .dev/ccl-perf $op -g 2 -b 1000001 -e 70000007 -f 7 -n 2 -w 1 -c 1 > /tmp/g.$op.log 2>&1
  sum /tmp/g.$op.log "-g 2 $op odd sizes"
done
for op in sendrecv alltoall all_gather broadcast; do
  timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 $X .dev/ccl-perf $op -b 3000001 -e 40000000 -f 5 -n 2 -w 1 -c 1 -d all > /tmp/d.$op.log 2>&1
  sum /tmp/d.$op.log "mpirun $op all types"
  CUDA_DEVICE_MAX_CONNECTIONS=1 timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 $X -x CUDA_DEVICE_MAX_CONNECTIONS .dev/ccl-perf $op -b 1M -e 256M -f 16 -n 3 -w 1 -c 1 > /tmp/q.$op.log 2>&1
  sum /tmp/q.$op.log "mpirun one queue $op 1M-256M"
done
grep -l -iE 'error|failed' /tmp/c.*.log /tmp/g.*.log /tmp/d.*.log /tmp/q.*.log | head
} 2>&1 | tee $O/18-whole-host-path-check.txt
