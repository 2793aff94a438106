# Call 7: the stream alone (tests/gpu/stage_latency.c: copy down, flag, wait for a host thread's
# flag, copy up) at 8 B .. 64 KiB, with and without the flags; then the staged sendrecv over the
# network path at 8 B .. 8 KiB by factors of 2 to find where the 250 us begins.
set -u; O=$OUT
gcc -O2 -I/usr/local/cuda/include tests/gpu/stage_latency.c -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcuda -lpthread -o /tmp/stage_latency 2>&1 | tail -3
{ /tmp/stage_latency; WAIT=0 /tmp/stage_latency; } 2>&1 | tee $O/7-stage-latency.txt
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CCL_NET=mpt LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 \
  mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x CCL_NET -x LD_LIBRARY_PATH \
  .dev/ccl-perf sendrecv -b 8 -e 8K -f 2 -n 300 -w 30 -c 1 --mem device 2>&1 | grep -E '^ +[0-9]' | awk '{print $1, $6, $10}' | tee -a $O/7-stage-latency.txt
