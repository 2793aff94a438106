# Session 28 call 1 (nvidia-h100-x1, carry .dev = working tree after 10f589c + the GPU fold):
# two ranks as processes on the one H100 over the network path (P2P and SHM off, mpt).
# 1) correctness of CCL_GPU_ALLREDUCE_FOLD_BYTES=1 (every all-reduce folded on the GPU): every
#    type x every reduction, in and out of place, 8 B - 2 MiB; 3 ranks (rule leaves them alone)
# 2) ring (defaults) against fold, all_reduce 8-128 MiB, GPU memory, two rounds; sendrecv once.
set -u; O=$OUT
net="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt NCCL_NVLS_ENABLE=0"
for np in 2 3; do
  env $net CCL_GPU_ALLREDUCE_FOLD_BYTES=1 LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 200 \
    mpirun --allow-run-as-root --bind-to none -np $np -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET \
    -x NCCL_NVLS_ENABLE -x CCL_GPU_ALLREDUCE_FOLD_BYTES -x LD_LIBRARY_PATH \
    .dev/ccl-perf all_reduce -b 8 -e 2M -f 64 -n 2 -w 1 -c 1 -d all -o all --mem device > $O/check-np$np.txt 2>&1
  echo "np $np rc $?: rows $(grep -cE '^ +[0-9]' $O/check-np$np.txt), wrong $(grep -E '^ +[0-9]' $O/check-np$np.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}')"
done
OUT=$O/ab ROUNDS=2 MEMS=device OPS=all_reduce RANGE="8M 128M" FACTOR=4 ARGS="-n 20 -w 3 -c 1" \
  SETS="ring: fold:CCL_GPU_ALLREDUCE_FOLD_BYTES=1" bash tests/gpu/device_net_ab.sh > $O/ab.txt 2>&1
OUT=$O/sr ROUNDS=1 MEMS=device OPS=sendrecv RANGE="8M 128M" FACTOR=4 ARGS="-n 20 -w 3 -c 1" \
  bash tests/gpu/device_net_ab.sh > $O/sr.txt 2>&1
cat $O/ab.txt $O/sr.txt
