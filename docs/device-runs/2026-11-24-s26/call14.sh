# Call 14: the machine's CPU topology, and the shared-memory transport (host memory, no copy
# helpers) with each rank pinned to one CPU: neighbours, far apart, unpinned.
set -u; O=$OUT
{ lscpu | grep -E 'Model name|Socket|Core|Thread|NUMA|L2|L3|MHz'; lscpu -e | head -20
for pair in "0 1" "0 8" "0 15" "none"; do
  set -- $pair
  if [ "$1" = none ]; then pre0=""; pre1=""; else pre0="taskset -c $1"; pre1="taskset -c $2"; fi
  for op in sendrecv all_reduce; do
    CCL_COPY_THREADS=0 LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none \
      -np 1 -x LD_LIBRARY_PATH -x CCL_COPY_THREADS $pre0 .dev/ccl-perf $op -b 1M -e 64M -f 8 -n 20 -w 3 -c 1 --mem host : \
      -np 1 -x LD_LIBRARY_PATH -x CCL_COPY_THREADS $pre1 .dev/ccl-perf $op -b 1M -e 64M -f 8 -n 20 -w 3 -c 1 --mem host 2>&1 |
      grep -E '^ +[0-9]' | awk -v t="cpus $pair $op" '{ w += $9; printf "%s%s:%s", (n++ ? " " : t ": "), $1, $8 } END { printf "  wrong %d\n", w }'
  done
done; } 2>&1 | tee $O/14-shm-pinning.txt
