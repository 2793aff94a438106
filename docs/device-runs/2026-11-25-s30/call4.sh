# Session 30 call 4 (nvidia-h100-x1, carry .dev = release build of HEAD): PyTorch through the
# hierarchy on one H100. tests/gpu/torch_check.py (every collective PyTorch calls, coalesced and
# p2p, new_group, 200 DDP steps) with every rank on GPU 0 (CCL_TORCH_ONE_GPU=1) and the ranks
# as emulated hosts (CCL_TORCH_HOSTS=2: CCL_HOSTID by rank): 4 ranks (hosts of 2 + 2) and 3
# ranks (2 + 1: uneven), hierarchical (default) against flat (CCL_HIERARCHY=0), compared by
# tests/gpu/torch_compare.py (data movement, max/min bitwise; sums within tolerance: the two
# add in different orders).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 CCL_TORCH_ONE_GPU=1 CCL_TORCH_HOSTS=2
export CCL_TORCH_OUT=/tmp/tc; mkdir -p $CCL_TORCH_OUT $OUT/r
CCL=$PWD/.dev
for n in ${NS:-4 3}; do
  for mode in hier flat; do
    h=auto; [ $mode = flat ] && h=0
    CCL_HIERARCHY=$h NCCL_DEBUG=INFO LD_PRELOAD=$CCL/libnccl.so.2 timeout -s KILL 200 \
      python3 -m torch.distributed.run --nproc-per-node $n tests/gpu/torch_check.py $mode$n > $OUT/r/torch_$mode$n.log 2>&1
    echo "torch $mode$n exit $?: $(grep -c 'hierarchy: ' $OUT/r/torch_$mode$n.log) hierarchy lines; $(grep -E 'done:' $OUT/r/torch_$mode$n.log)"
  done
  python3 tests/gpu/torch_compare.py $CCL_TORCH_OUT hier$n flat$n $n > $OUT/r/compare$n.txt 2>&1
  echo "compare $n ranks exit $?: $(tail -1 $OUT/r/compare$n.txt)"
  grep -iE "differ|FAIL|not equal" $OUT/r/compare$n.txt | head -5
done
cd $OUT && tar czf logs.tgz r && rm -rf r
