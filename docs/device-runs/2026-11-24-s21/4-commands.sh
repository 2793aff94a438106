export OUT
MEM=device SETS="socket:CCL_NET=socket mpt1:CCL_NET=mpt,CCL_MPT_ENGINES=1 off:CCL_NET=mpt,CCL_MPT_INLINE_BYTES=0 inline:CCL_NET=mpt" OPS="all_reduce sendrecv all_gather broadcast" MAX=4M STEP=4 REPEAT=2 ITERS=300 DEBUG=INFO bash tests/gpu/device_mpt_small.sh 2>&1
tar czf $OUT/logs.tgz -C $OUT small; rm -rf $OUT/small
