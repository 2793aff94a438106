# Call 22: host-only cuda-ipc with its receive slots in shared host memory too, so reductions stay
# in the engine (chunks into the peer's slots, reduced out of them by kernels): NCCL_P2P_DISABLE=1,
# two ranks under mpirun on the one GPU; every op checked 8 B..128 MiB; reductions every type x
# sum/prod/max/min/avg; one hardware queue; -g 2; against the staged path (host-only off).
set -u; O=$OUT
export NCCL_P2P_DISABLE=1 LD_LIBRARY_PATH=$PWD/.dev
X="-x NCCL_P2P_DISABLE -x LD_LIBRARY_PATH -x CCL_IPC_HOST_ONLY -x CUDA_DEVICE_MAX_CONNECTIONS -x NCCL_DEBUG"
run() { # label op ho args...
  local label=$1 op=$2 ho=$3; shift 3
  CCL_IPC_HOST_ONLY=$ho CUDA_DEVICE_MAX_CONNECTIONS=${MAXC:-8} NCCL_DEBUG=${DBG:-WARN} timeout -s KILL 150 mpirun --allow-run-as-root --bind-to none -np 2 $X \
    .dev/ccl-perf $op "$@" --mem device > /tmp/r.$label.$op.log 2>&1
  echo "exit $?" >> /tmp/r.$label.$op.log
  grep -E '^ +[0-9]' /tmp/r.$label.$op.log | awk -v t="$label $op" '{ w += $9; if ($13 != "N/A") w += $13; last = $8; n++ } END { printf "%s: %d rows, wrong %d, largest %s GB/s\n", t, n, w, last }'
  grep -h '^exit [^0]' /tmp/r.$label.$op.log
}
{
for op in all_reduce reduce_scatter reduce sendrecv alltoall all_gather broadcast gather scatter; do run host-only $op 1 -b 8 -e 128M -f 8 -n 5 -w 1 -c 1; done
for op in all_reduce reduce_scatter reduce; do run staged $op 0 -b 128M -e 128M -n 5 -w 1 -c 1; done
for op in all_reduce reduce_scatter reduce; do run host-only-types $op 1 -b 1000000 -e 30000000 -f 5 -n 2 -w 1 -c 1 -d all -o sum,prod,max,min,avg; done
for op in all_reduce reduce_scatter sendrecv; do MAXC=1 run host-only-1q $op 1 -b 1M -e 256M -f 16 -n 3 -w 1 -c 1; done
DBG=INFO run host-only-info all_reduce 1 -b 64M -e 64M -n 3 -w 1 -c 1
sed 's/\x1b\[[0-9;]*m//g' /tmp/r.host-only-info.all_reduce.log | grep -oE 'rank 0: cuda-ipc (sent|with).*' | head -3
for op in all_reduce sendrecv reduce_scatter; do
  CCL_IPC_HOST_ONLY=1 timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 1 $X .dev/ccl-perf $op -g 2 -b 1000 -e 70000000 -f 9 -n 2 -w 1 -c 1 > /tmp/g2.$op.log 2>&1
  grep -E '^ +[0-9]' /tmp/g2.$op.log | awk -v t="host-only -g 2 $op" '{ w += $9; if ($13 != "N/A") w += $13; n++ } END { printf "%s: %d rows, wrong %d\n", t, n, w }'
done
} 2>&1 | tee $O/22-host-only-reductions.txt
