# Call 3: host memory over the network path, three rounds alternated: send/receive at 64 and
# 128 MiB against the all-reduce at 128 MiB as a ring (two 64 MiB steps), as a ring in one step
# and as one exchange (a 128 MiB send/receive that folds): what the all-reduce pays beyond
# the bytes it moves.
set -u; O=$OUT
for r in 1 2 3; do
  OUT=/tmp/o ROUNDS=1 MEMS=host OPS=sendrecv RANGE="64M 128M" FACTOR=2 ARGS="-n 20 -w 3 -c 1" SETS="sr:" bash tests/gpu/device_net_ab.sh
  OUT=/tmp/o ROUNDS=1 MEMS=host OPS=all_reduce RANGE="64M 128M" FACTOR=2 ARGS="-n 20 -w 3 -c 1" \
    SETS="ring:CCL_ALLREDUCE_EXCHANGE_MAX_BYTES=0 onestep:CCL_ALLREDUCE_EXCHANGE_MAX_BYTES=0,CCL_RING_ONE_STEP=1 xchg:CCL_ALLREDUCE_EXCHANGE_MAX_BYTES=1073741824" bash tests/gpu/device_net_ab.sh
done 2>&1 | sed "s/^/r /" | tee $O/3-ar-vs-sr.txt
