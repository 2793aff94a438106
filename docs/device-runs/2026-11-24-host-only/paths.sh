# host-only cuda-ipc on by default where peer-to-peer is off (CCL_IPC_HOST_ONLY=auto).
# (a) the one-GPU regression round with only NCCL_P2P_DISABLE=1 exported (two ranks in one
# process on the GPU stay staged by the shared-GPU guard; mpirun ranks take host-only);
# (b) which path each setting takes, 128 MiB sendrecv / all_reduce, device memory.
set -u; O=$OUT
( export NCCL_P2P_DISABLE=1; OUT=/tmp/o RUNS=3 bash tests/gpu/device_one_gpu.sh > /tmp/round.log 2>&1 )
cp /tmp/o/summary.md $O/1-round-p2p-off-summary.md
export LD_LIBRARY_PATH=$PWD/.dev
X="-x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x NCCL_P2P_LEVEL -x LD_LIBRARY_PATH -x CCL_IPC_HOST_ONLY -x NCCL_DEBUG -x CCL_NET"
{
for set in "auto-p2p-off:NCCL_P2P_DISABLE=1" "level-loc:NCCL_P2P_LEVEL=LOC" "forced-off:NCCL_P2P_DISABLE=1,CCL_IPC_HOST_ONLY=0" \
           "shm-off:NCCL_P2P_DISABLE=1,NCCL_SHM_DISABLE=1,CCL_NET=mpt" "p2p-on:"; do
  name=${set%%:*}; vars=${set#*:}
  for op in sendrecv all_reduce; do
    env ${vars//,/ } NCCL_DEBUG=INFO timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 $X \
      .dev/ccl-perf $op -b 128M -e 128M -n 10 -w 2 -c 1 --mem device > /tmp/p.$name.$op.log 2>&1
    echo "$name $op: exit $? $(grep -E '^ +[0-9]' /tmp/p.$name.$op.log | awk '{printf "busbw %s/%s wrong %d/%s", $8, $12, $9, $13}')"
    sed 's/\x1b\[[0-9;]*m//g' /tmp/p.$name.$op.log | grep -oE 'cuda-ipc (host-only|host path|on|off)[^(]{0,60}|via (SHM|NET|P2P)[^ ]*|staged' | sort | uniq -c | head -4
  done
done
} 2>&1 | tee $O/1-paths.txt
