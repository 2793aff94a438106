# Call 2: where the CPU goes, host memory against GPU memory (staged), send/receive and
# all-reduce at 128 MiB, the defaults, with a system-wide profile (.dev/perf).
set -u; O=$OUT
for mem in host device; do
  OUT=/tmp/o MEM=$mem SETS="def:" OPS="sendrecv all_reduce" PROFILE=1 ITERS=300 \
    bash tests/gpu/device_mpt_threads.sh > $O/2-threads-$mem.txt 2>&1
done
for mem in host device; do echo "#### $mem"; grep -E '^==|total|mpt|exec|copy|proxy|ccl' $O/2-threads-$mem.txt | head -40; done
