# Call 2: host-only cuda-ipc for more than two ranks (through the receive slots in shared host
# memory; direct transfers off) and for two with CCL_IPC_DIRECT=0; mismatch.c again (it now
# polls the staged path's async errors). One GPU, every rank a process on it, P2P off.
set -u; O=$OUT
export LD_LIBRARY_PATH=$PWD/.dev NCCL_P2P_DISABLE=1
X="-x NCCL_P2P_DISABLE -x LD_LIBRARY_PATH -x CCL_IPC_HOST_ONLY -x CCL_IPC_DIRECT -x NCCL_DEBUG"
gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/mismatch.c -L .dev -Wl,-rpath,$PWD/.dev \
  -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o /tmp/mismatch
{
echo "mismatch, P2P off:"; ONE_GPU=1 timeout -s KILL 60 /tmp/mismatch 2>&1 | tail -n 2
echo "mismatch, P2P on:"; NCCL_P2P_DISABLE=0 ONE_GPU=1 timeout -s KILL 60 /tmp/mismatch 2>&1 | tail -n 2
rows() { grep -E '^ +[0-9]' "$1" | awk -v t="$2" '{ w += $9; if ($13 != "N/A") w += $13; n++; last = $1 ":" $8 "/" $12 } END { printf "%s: %d rows, wrong %d, last %s\n", t, n, w, last }'; }
for np in 3 4; do
  for op in all_reduce reduce_scatter reduce all_gather broadcast alltoall sendrecv gather scatter; do
    d="-d float,int8"; case $op in all_reduce|reduce_scatter|reduce) d="-d float,bfloat16,int32 -o sum,max,avg";; esac
    NCCL_DEBUG=INFO timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np $np $X .dev/ccl-perf $op \
      -b 8 -e 64M -f 16 -n 3 -w 1 -c 1 --mem device $d > /tmp/c.$np.$op.log 2>&1; rc=$?
    rows /tmp/c.$np.$op.log "np $np $op (exit $rc)"
  done
  sed 's/\x1b\[[0-9;]*m//g' /tmp/c.$np.all_reduce.log | grep -iE 'host-only|cuda-ipc (on|off)' | sort | uniq -c | head -3
done
for op in sendrecv all_gather alltoall all_reduce broadcast; do
  CCL_IPC_DIRECT=0 timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 $X .dev/ccl-perf $op \
    -b 8 -e 64M -f 16 -n 3 -w 1 -c 1 --mem device -d float,int8 > /tmp/d.$op.log 2>&1; rc=$?
  rows /tmp/d.$op.log "np 2 direct off $op (exit $rc)"
done
for np in 3 4; do
  for op in all_reduce all_gather reduce_scatter alltoall broadcast sendrecv; do
    for ho in auto 0; do
      CCL_IPC_HOST_ONLY=$ho timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np $np $X .dev/ccl-perf $op \
        -b 128M -e 128M -n 10 -w 2 -c 1 --mem device > /tmp/p.$np.$op.$ho.log 2>&1
      rows /tmp/p.$np.$op.$ho.log "perf np $np $op host-only=$ho"
    done
  done
done
} 2>&1 | tee $O/2-host-only-more-ranks.txt
