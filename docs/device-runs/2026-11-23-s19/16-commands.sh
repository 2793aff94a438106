export NCCL_NVLS_ENABLE=0
CCL=$PWD/.dev
gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/two_comms.c -L "$CCL" -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -lpthread -o /tmp/two_comms 2>&1 | head -5
for mc in 32 32 32 32 32 32 8 8 8 8 8 8; do CUDA_DEVICE_MAX_CONNECTIONS=$mc TWO_COMMS_ONE_GPU=1 TWO_COMMS_TIMEOUT_S=15 NCCL_DEBUG=WARN timeout -s KILL 20 stdbuf -oL /tmp/two_comms 200 > $OUT/mc.log 2>&1; echo "MAX_CONNECTIONS=$mc exit $? $(grep -c 'PASS two_comms' $OUT/mc.log) $(grep -c watchdog $OUT/mc.log)"; done
