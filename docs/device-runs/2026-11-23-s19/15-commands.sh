export NCCL_NVLS_ENABLE=0
for lib in old new; do
CCL=$PWD/.dev; [ $lib = old ] && CCL=$PWD/.dev/old
gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/two_comms.c -L "$CCL" -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -lpthread -o /tmp/two_comms_$lib 2>&1 | head -5
for k in 1 2 3; do TWO_COMMS_ONE_GPU=1 TWO_COMMS_TIMEOUT_S=25 NCCL_DEBUG=WARN timeout -s KILL 35 stdbuf -oL -eL /tmp/two_comms_$lib 200 > $OUT/tc_${lib}_$k.log 2>&1; echo "$lib run $k exit $?"; grep -E "two_comms" $OUT/tc_${lib}_$k.log | head -2; done; done
