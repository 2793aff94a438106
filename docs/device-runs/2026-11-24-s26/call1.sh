set -u; O=$OUT
export NCCL_NVLS_ENABLE=0
{ echo "## group_vs_lone, defaults"; LIBS=cur NETCHECK=0 bash tests/gpu/device_group_vs_lone.sh
  echo "## group_vs_lone, CCL_GPU_STREAM_P2P=0"; CCL_GPU_STREAM_P2P=0 LIBS=cur NETCHECK=0 bash tests/gpu/device_group_vs_lone.sh; } > $O/1-gvl.txt 2>&1
{ echo "## mismatched CCL_GPU_STREAM_P2P (rank 0: 0, rank 1: 1), sendrecv 128 MiB GPU"
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none \
   -np 1 -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET -x LD_LIBRARY_PATH -x CCL_GPU_STREAM_P2P=0 .dev/ccl-perf sendrecv -b 128M -e 128M -n 3 -w 1 -c 1 --mem device : \
   -np 1 -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET -x LD_LIBRARY_PATH -x CCL_GPU_STREAM_P2P=1 .dev/ccl-perf sendrecv -b 128M -e 128M -n 3 -w 1 -c 1 --mem device 2>&1 | tail -15
  echo "exit ${PIPESTATUS[0]}"; } > $O/1-mismatch.txt 2>&1
OUT=/tmp/o ROUNDS=3 MEMS=device OPS=sendrecv RANGE="128M 512M" FACTOR=4 ARGS="-n 20 -w 3 -c 1" \
  SETS="off:CCL_GPU_STREAM_P2P=0 auto: s8:CCL_GPU_STREAM_PIECE_BYTES=8388608" bash tests/gpu/device_net_ab.sh > $O/1-ab.txt 2>&1
OUT=/tmp/o MAX=32M bash tests/gpu/device_net_check.sh > $O/1-netcheck.txt 2>&1; tail -n 18 $O/1-netcheck.txt > $O/1-netcheck-tail.txt
cat $O/1-gvl.txt $O/1-mismatch.txt $O/1-ab.txt $O/1-netcheck-tail.txt
