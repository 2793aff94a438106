# Call 13: the shared-memory transport with host memory (two processes, no GPU in the path) on
# 16 CPUs: 1-128 MiB send/receive and all-reduce, copy helpers auto / 0, two rounds.
set -u; O=$OUT
for r in 1 2; do for ct in auto 0; do for op in sendrecv all_reduce; do
  CCL_COPY_THREADS=$ct LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x CCL_COPY_THREADS \
    .dev/ccl-perf $op -b 1M -e 128M -f 8 -n 20 -w 3 -c 1 --mem host 2>&1 | grep -E '^ +[0-9]' | awk -v t="$r copy=$ct $op" '{ w += $9; printf "%s%s:%s", (n++ ? " " : t ": "), $1, $8 } END { printf "  wrong %d\n", w }'
done; done; done | tee $O/13-shm-host.txt
