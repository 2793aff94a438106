# Call 8: tests/gpu/stage_latency.c as two processes at once on the one GPU (no libccl)
gcc -O2 -I/usr/local/cuda/include tests/gpu/stage_latency.c -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcuda -lpthread -o /tmp/sl && (ITERS=1000 /tmp/sl > /tmp/a.txt & ITERS=1000 /tmp/sl > /tmp/b.txt; wait); cat /tmp/a.txt /tmp/b.txt | tee $OUT/8-two-processes.txt
# Call 4 (not kept as a file): device_net_ab.sh with SETS="nccl:NCCL_NET=Socket ccl:" on one GPU -- NCCL refuses (Duplicate GPU detected), libccl sendrecv 128 MiB 5.68/5.16 and 5.69/5.49 GB/s
