# Device memory over the network path with copy threads: GPU piece sizes, and where the
# proxy thread's time goes.
which perf || ls /usr/bin/perf* 2>/dev/null || echo "no perf"
CT=CCL_MPT_ENGINES=8,CCL_SOCKET_FRAME_BYTES=8388608,CCL_COPY_THREADS=8,CCL_COPY_PARALLEL_BYTES=131072
VARIANTS="p0:$CT,CCL_GPU_PIECE_BYTES=0 p8m:$CT,CCL_GPU_PIECE_BYTES=8388608 p32m:$CT,CCL_GPU_PIECE_BYTES=33554432" \
  MEMS=device OPS="sendrecv all_reduce alltoall" bash tests/gpu/device_net_knobs.sh
for op in sendrecv all_reduce; do
env CCL_MPT_ENGINES=8 CCL_SOCKET_FRAME_BYTES=8388608 CCL_COPY_THREADS=8 CCL_COPY_PARALLEL_BYTES=131072 CCL_GPU_PIECE_BYTES=8388608 \
 LD_LIBRARY_PATH=$PWD/.dev CCL_NET=mpt NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 timeout -s KILL 60 mpirun --allow-run-as-root --bind-to none -np 2 \
 -x LD_LIBRARY_PATH -x CCL_NET -x NCCL_SHM_DISABLE -x NCCL_P2P_DISABLE -x CCL_MPT_ENGINES -x CCL_SOCKET_FRAME_BYTES -x CCL_COPY_THREADS \
 -x CCL_COPY_PARALLEL_BYTES -x CCL_GPU_PIECE_BYTES .dev/ccl-perf $op -b 128M -e 128M -n 150 -w 2 -c 0 > $OUT/prof.$op.log 2>&1 &
sleep 4; python3 tests/bench/thread_cpu.py ccl-perf 0 2
P=$(pgrep -f "ccl-perf $op" | head -1); T=$(grep -l ccl-proxy /proc/$P/task/*/comm | head -1 | cut -d/ -f5)
if command -v perf >/dev/null; then perf record -g -t $T -o $OUT/perf.$op.data -- sleep 3 > /dev/null 2>&1; perf report -i $OUT/perf.$op.data --no-children --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -30; rm -f $OUT/perf.$op.data; fi
wait; echo "$op: $(grep -E '^ +[0-9]' $OUT/prof.$op.log | tail -1)"
done
rm -rf $OUT/knobs
