# Call 12: tests/gpu/host_ring_probe.c (two processes, a ring in shared pinned host memory, copy
# engines and stream memory operations only) against libccl's staged path over shared memory
# (P2P off, SHM on), 512 MiB send/receive, both on the one GPU.
set -u; O=$OUT
gcc -O2 -I/usr/local/cuda/include tests/gpu/host_ring_probe.c -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcuda -o /tmp/hrp 2>&1 | tail -5
{ timeout -s KILL 120 /tmp/hrp; SLOT_MIB=2 SLOTS=16 timeout -s KILL 120 /tmp/hrp
  NCCL_P2P_DISABLE=1 LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_P2P_DISABLE -x LD_LIBRARY_PATH \
    .dev/ccl-perf sendrecv -b 128M -e 512M -f 4 -n 10 -w 2 -c 1 --mem device 2>&1 | grep -E '^ +[0-9]' | awk '{print "libccl staged over shm sendrecv", $1, $8, $12, "wrong", $9}'
} 2>&1 | tee $O/12-host-ring-probe.txt
