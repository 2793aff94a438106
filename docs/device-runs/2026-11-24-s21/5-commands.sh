export OUT
SETS="mpt1:CCL_NET=mpt,CCL_MPT_ENGINES=1 base:CCL_NET=mpt s1m:CCL_NET=mpt,CCL_MPT_SPLIT_BYTES=1048576,CCL_MPT_INLINE_BYTES=1048576 s2m:CCL_NET=mpt,CCL_MPT_SPLIT_BYTES=2097152,CCL_MPT_INLINE_BYTES=2097152" OPS="all_reduce sendrecv all_gather broadcast" MAX=16M STEP=4 REPEAT=2 ITERS=200 bash tests/gpu/device_mpt_small.sh 2>&1
for op in sendrecv all_reduce; do OP=$op SIZE=128M ITERS=30 REPEAT=2 SETS="base:CCL_MPT_SPLIT_BYTES=262144 s1m:CCL_MPT_SPLIT_BYTES=1048576,CCL_MPT_INLINE_BYTES=1048576" bash tests/gpu/device_mpt_variance.sh 2>&1; done
tar czf $OUT/logs.tgz -C $OUT small variance; rm -rf $OUT/small $OUT/variance
