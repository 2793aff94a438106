# Call 16 (review): the probe after folding its repeated set-up into helpers (module part, both
# loading modes); the lazy kernel path's cache keys (preload off, cold then warm cache).
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.dev
nvcc -cubin -arch=sm_90 -o /tmp/probe_k.cubin tests/gpu/module_load_probe_k.cu && nvcc -O2 -arch=sm_90 -o /tmp/load_probe tests/gpu/module_load_probe.cu -lcuda -lpthread
for m in LAZY EAGER; do CUDA_MODULE_LOADING=$m PROBE_MODULES_ONLY=1 timeout 60 /tmp/load_probe /tmp/probe_k.cubin; done
timeout 180 .dev/gpu_backend_test --test-threads=1 2>&1 | grep -E "test result|FAIL|panick"
for k in cold warm; do CCL_KERNEL_PRELOAD=0 CCL_KERNEL_CACHE=/tmp/k16 timeout -s KILL 60 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH -x CCL_KERNEL_PRELOAD -x CCL_KERNEL_CACHE .dev/ccl-perf all_reduce -b 8 -e 16M -f 16 -n 3 -w 1 -c 1 -g 2 -d float,bfloat16 -o sum,max > /tmp/k16.log 2>&1; echo "preload off, $k cache: exit $?, $(grep -cE '^ +[0-9]' /tmp/k16.log) rows, $(grep 'Out of bounds' /tmp/k16.log), $(ls /tmp/k16 | grep -c bin) images on disk"; done
