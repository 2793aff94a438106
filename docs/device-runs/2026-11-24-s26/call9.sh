# Call 9: frame size and frames in flight on multipath links of 8 engines (host memory, two
# ranks over loopback), 128 and 512 MiB, send/receive and all-reduce, two alternated rounds.
set -u; O=$OUT
OUT=/tmp/o ROUNDS=2 MEMS="host" OPS="sendrecv all_reduce" RANGE="128M 512M" FACTOR=4 ARGS="-n 12 -w 2 -c 1" \
  SETS="f16: f32:CCL_SOCKET_FRAME_BYTES=33554432 f32i256:CCL_SOCKET_FRAME_BYTES=33554432,CCL_MPT_INFLIGHT_BYTES=268435456 f16i128:CCL_MPT_INFLIGHT_BYTES=134217728 f64:CCL_SOCKET_FRAME_BYTES=67108864,CCL_MPT_INFLIGHT_BYTES=268435456" \
  bash tests/gpu/device_net_ab.sh | tee $O/9-frames.txt
