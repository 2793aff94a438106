export OUT
SETS="socket:CCL_NET=socket mpt1:CCL_NET=mpt,CCL_MPT_ENGINES=1 off:CCL_NET=mpt,CCL_MPT_INLINE_BYTES=0 inline:CCL_NET=mpt" OPS="all_reduce sendrecv all_gather broadcast" MAX=4M STEP=4 REPEAT=3 bash tests/gpu/device_mpt_small.sh 2>&1
bash tests/gpu/device_net_check.sh; echo "netcheck exit $?"
tar czf $OUT/logs.tgz -C $OUT small netcheck; rm -rf $OUT/small $OUT/netcheck
