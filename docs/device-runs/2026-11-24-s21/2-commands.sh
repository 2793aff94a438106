export OUT
SETS="socket:CCL_NET=socket mpt1:CCL_NET=mpt,CCL_MPT_ENGINES=1 off:CCL_NET=mpt,CCL_MPT_INLINE_BYTES=0 in64k:CCL_NET=mpt,CCL_MPT_INLINE_BYTES=65536 in256k:CCL_NET=mpt,CCL_MPT_INLINE_BYTES=262144" OPS="all_reduce sendrecv all_gather" MAX=4M STEP=4 bash tests/gpu/device_mpt_small.sh 2>&1
for op in sendrecv all_reduce; do OP=$op SIZE=128M ITERS=30 REPEAT=2 SETS="off:CCL_MPT_INLINE_BYTES=0 in256k:CCL_MPT_INLINE_BYTES=262144" bash tests/gpu/device_mpt_variance.sh 2>&1; done
tar czf $OUT/logs.tgz -C $OUT small variance; rm -rf $OUT/small $OUT/variance
