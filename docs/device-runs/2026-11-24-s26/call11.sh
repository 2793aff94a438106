# Call 11: the staged GPU path over SHARED MEMORY (P2P off, SHM on: machines without GPU P2P),
# where CCL_GPU_STREAM_PIECE_BYTES=auto leaves collectives unstreamed: off against fixed 8 MiB
# and 2 MiB stream pieces, GPU memory, two ranks on the one H100, two alternated rounds.
set -u; O=$OUT
OUT=/tmp/o ROUNDS=2 MEMS="device" OPS="all_reduce sendrecv alltoall reduce_scatter broadcast" RANGE="8M 512M" FACTOR=8 ARGS="-n 12 -w 2 -c 1" \
  SETS="off:NCCL_SHM_DISABLE=0 s8:NCCL_SHM_DISABLE=0,CCL_GPU_STREAM_PIECE_BYTES=8388608 s2:NCCL_SHM_DISABLE=0,CCL_GPU_STREAM_PIECE_BYTES=2097152" \
  bash tests/gpu/device_net_ab.sh | tee $O/11-shm-streamed.txt
