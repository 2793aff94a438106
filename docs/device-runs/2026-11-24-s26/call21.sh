# Call 21: the final library (fd859a7): host-only (P2P off) and default cuda-ipc, every op under mpirun, checked.
set -u; O=$OUT
export LD_LIBRARY_PATH=$PWD/.dev
{
for mode in host-only default; do
  for op in sendrecv alltoall all_gather broadcast gather scatter all_reduce reduce_scatter reduce; do
    if [ $mode = host-only ]; then e="NCCL_P2P_DISABLE=1 CCL_IPC_HOST_ONLY=1"; else e="CCL_IPC_HOST_ONLY=0"; fi
    env $e timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 $(for v in $e; do echo -n "-x ${v%%=*} "; done) -x LD_LIBRARY_PATH \
      .dev/ccl-perf $op -b 8 -e 128M -f 16 -n 5 -w 1 -c 1 --mem device > /tmp/f.log 2>&1
    echo "exit $?" >> /tmp/f.log
    grep -E '^ +[0-9]' /tmp/f.log | awk -v t="$mode $op" '{ w += $9; if ($13 != "N/A") w += $13; last = $8 } END { printf "%s: %d rows, wrong %d, 128 MiB %s GB/s\n", t, NR, w, last }'
    grep -h '^exit' /tmp/f.log
  done
done
} 2>&1 | tee $O/21-final.txt
