set -u
CCL=$PWD/.dev
mpicc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/reuse.c -L "$CCL" -Wl,-rpath,"$CCL" -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o /tmp/reuse > $OUT/reuse.build.log 2>&1
NCCL_DEBUG=INFO timeout -s KILL 60 mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_DEBUG /tmp/reuse > $OUT/reuse.log 2>&1; echo "reuse exit $?"
grep -E "PASS|FAIL" $OUT/reuse.log; grep -h "straight between" $OUT/reuse.log | sed 's/.*rank/rank/'
OUT0=$OUT
OUT=$OUT0/mc1 ITERS=25 CONFIGS="tp2-sp pp2-interleaved" DEADLINE=130 bash tests/megatron/run.sh 2>&1 | grep -E "^(tp2|pp2)|median" | tail -8
OUT=$OUT0/mc8 CUDA_DEVICE_MAX_CONNECTIONS=8 ITERS=25 CONFIGS="tp2-sp" DEADLINE=75 bash tests/megatron/run.sh 2>&1 | grep -E "^(tp2|pp2)|median" | tail -4
