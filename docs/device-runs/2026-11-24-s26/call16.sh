# Call 16: tests/bench/shm_ring_probe.c (two processes, one way through a shared ring, no library)
# against libccl's shared-memory transport (host memory): broadcast (one way) and sendrecv.
set -u; O=$OUT
gcc -O2 -o /tmp/srp tests/bench/shm_ring_probe.c
{ /tmp/srp; /tmp/srp
  for op in broadcast sendrecv; do
    LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH \
      .dev/ccl-perf $op -b 1M -e 64M -f 8 -n 20 -w 3 -c 1 --mem host 2>&1 | grep -E '^ +[0-9]' | awk -v t="libccl shm $op" '{ w += $9; printf "%s%s:%s", (n++ ? " " : t ": "), $1, $8 } END { printf "  wrong %d\n", w }'
  done; } 2>&1 | tee $O/16-shm-ring-probe.txt
