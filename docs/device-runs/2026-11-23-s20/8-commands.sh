# Call 7: four ranks on one GPU, every type and operation (the avg rows stop at 8 MiB)
mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH .dev/ccl-perf all_reduce -b 8 -e 16M -f 16 -n 3 -w 1 -c 1 -g 4 -d float,bfloat16,int32,float8e4m3 -o sum,max,avg
# Call 8: the 8 MiB average all-reduce by ranks and hardware queues (8-gN-CONNECTIONS-PRELOAD.log)
for v in "g4 8 1" "g4 8 0" "g4 32 1" "g3 8 1" "g2 8 1"; do set -- $v; CUDA_DEVICE_MAX_CONNECTIONS=$2 CCL_KERNEL_PRELOAD=$3 timeout -s KILL 40 mpirun --allow-run-as-root --bind-to none -np 1 -x LD_LIBRARY_PATH -x CUDA_DEVICE_MAX_CONNECTIONS -x CCL_KERNEL_PRELOAD .dev/ccl-perf all_reduce -b 8M -e 8M -n 3 -w 1 -c 1 -g ${1:1} -o avg; done
