# Call 15: the shared-memory transport (host memory, two processes, 16 CPUs) with glibc's
# memcpy told to use non-temporal stores from 64 KiB / 256 KiB on (GLIBC_TUNABLES), against the
# default (whose threshold follows the 300 MiB L3 the VM reports): the ring's copies then skip
# the writer's cache. Two rounds.
set -u; O=$OUT
for r in 1 2; do for nt in default 0x10000 0x40000; do
  if [ $nt = default ]; then tun=""; else tun="glibc.cpu.x86_non_temporal_threshold=$nt"; fi
  for op in sendrecv all_reduce; do
    GLIBC_TUNABLES=$tun LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH -x GLIBC_TUNABLES \
      .dev/ccl-perf $op -b 1M -e 64M -f 8 -n 20 -w 3 -c 1 --mem host 2>&1 |
      grep -E '^ +[0-9]' | awk -v t="$r nt=$nt $op" '{ w += $9; printf "%s%s:%s", (n++ ? " " : t ": "), $1, $8 } END { printf "  wrong %d%s\n", w, n ? "" : " (no rows)" }'
  done
done; done 2>&1 | tee $O/15-shm-nt.txt
GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=0x10000 /lib64/ld-linux-x86-64.so.2 --list-tunables 2>/dev/null | grep -i temporal | tee -a $O/15-shm-nt.txt
/lib64/ld-linux-x86-64.so.2 --list-tunables 2>/dev/null | grep -iE 'temporal|rep_movsb|shared_cache' | tee -a $O/15-shm-nt.txt
