export NCCL_NVLS_ENABLE=0
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib; CCL=$PWD/.dev
mkdir -p $OUT/lat
echo "## zero-SM latency (CCL_IPC_LL_EXCHANGE_BYTES=0) vs NCCL"
python3 tests/gpu/perf_rows.py --header "mode op,size" NCCL,libccl-default,libccl-zeroSM
for op in sendrecv alltoall all_gather broadcast gather scatter; do
 for mode in g2 mpi; do
  for lib in nccl ccl zsm; do
   [ $lib = nccl ] && LP=$NV || LP=$CCL; [ $lib = zsm ] && LL=0 || LL=
   if [ $mode = g2 ]; then
    env ${LL:+CCL_IPC_LL_EXCHANGE_BYTES=$LL} LD_LIBRARY_PATH=$LP timeout -s KILL 40 .dev/ccl-perf $op -b 8 -e 8 -n 200 -w 20 -c 0 -g 2 > $OUT/lat/$op.$mode.$lib.log 2>&1
   else
    env ${LL:+CCL_IPC_LL_EXCHANGE_BYTES=$LL} LD_LIBRARY_PATH=$LP timeout -s KILL 40 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE ${LL:+-x CCL_IPC_LL_EXCHANGE_BYTES} .dev/ccl-perf $op -b 8 -e 8 -n 200 -w 20 -c 0 > $OUT/lat/$op.$mode.$lib.log 2>&1
   fi
  done
  python3 tests/gpu/perf_rows.py "$mode $op,8" $OUT/lat/$op.$mode.{nccl,ccl,zsm}.log
 done
done
echo "## network path, copy threads 4"
HOSTMEM=1 ENGINES="1 4 8" PIECES=4194304 FRAMES=4194304 COPY_THREADS=4 timeout 200 bash tests/gpu/device_net.sh
echo "## network path, copy threads 0"
HOSTMEM=1 ENGINES="4" PIECES=4194304 FRAMES=4194304 COPY_THREADS=0 timeout 100 bash tests/gpu/device_net.sh
echo "## libccl socket transport over the network path"
for op in all_reduce sendrecv alltoall; do
 LD_LIBRARY_PATH=$CCL CCL_NET=socket NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_GPU_PIECE_BYTES=4194304 timeout -s KILL 60 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x CCL_NET -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_GPU_PIECE_BYTES .dev/ccl-perf $op -b 128M -e 128M -n 10 -w 2 -c 1 > $OUT/lat/sock.$op.log 2>&1
 echo "ccl socket $op: $(grep -E '^ +[0-9]' $OUT/lat/sock.$op.log | tail -1)"
done
nproc; lscpu | grep -E "Model name|Socket|NUMA node" 
