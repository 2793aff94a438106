# nvidia-h200-x2: under mpirun, alltoall / all_gather 512 MiB (call 8 showed 0.68 / 0.76 of NCCL), NCCL, this build, .dev/old (2026-11-23 17:17), preload off; then tp2-sp again
export NCCL_NVLS_ENABLE=0
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
for op in alltoall all_gather; do
  for lib in nccl ccl old ccl-nopre ccl; do
    case $lib in nccl) LP=$NV;; old) LP=$PWD/.dev/old;; *) LP=$PWD/.dev;; esac
    [ $lib = ccl-nopre ] && P=0 || P=1
    echo "$op $lib: $(CCL_KERNEL_PRELOAD=$P LD_LIBRARY_PATH=$LP timeout -s KILL 40 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x CCL_KERNEL_PRELOAD .dev/ccl-perf $op -b 512M -e 512M -n ${N:-100} -w 5 -c 0 2>&1 | grep -E '^ +[0-9]' | awk '{print $6 " us, " $8 " GB/s"}')"
  done
done
ITERS=100 CONFIGS=tp2-sp DEADLINE=240 bash tests/megatron/run.sh 2>&1 | grep -E "^\[megatron|tp2-sp|FAIL|PASS"
tar czf $OUT/megatron.tgz -C $OUT megatron 2>/dev/null; rm -rf $OUT/megatron
