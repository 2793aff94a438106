# For nvidia-h200-x2 (carry .dev), NOT RUN yet (no two-GPU machine lent in session 29): the
# hierarchy with its host stage on real NVLink. Four ranks as processes on two GPUs (rank r on
# GPU r % 2), two emulated hosts of one rank per GPU each (CCL_HOSTID / NCCL_HOSTID = r / 2), so
# the host stages run GPU0 <-> GPU1 over NVLink and the stage across the hosts over loopback
# (mpt; NVIDIA NCCL: its socket transport on lo). NCCL runs the same emulation in the same call
# (its host hash follows NCCL_HOSTID, so two ranks per GPU on different "hosts" are allowed).
# Sets: nccl, ccl (defaults: hierarchical), flat (CCL_HIERARCHY=0), a2a (CCL_HIERARCHY_ALLTOALL=1).
# Checked, 8-128 MiB, two alternated rounds; per-op lines "op size set: busbw oop/ip".
set -u; O=$OUT/r; mkdir -p $O
NV=${NV:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}
cat > /tmp/hw.sh <<'W'
#!/bin/bash
export CCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK / 2)) NCCL_HOSTID=emulated-host-$((OMPI_COMM_WORLD_RANK / 2))
exec "$@"
W
chmod +x /tmp/hw.sh
run() { # log lib env-words... -- ccl-perf args
  local log=$1 lib=$2; shift 2; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=lo "${envs[@]}" LD_LIBRARY_PATH=$lib timeout -s KILL 200 mpirun --allow-run-as-root \
    --bind-to none -np 4 -x NCCL_NVLS_ENABLE -x NCCL_SOCKET_IFNAME -x LD_LIBRARY_PATH $(env "${envs[@]}" env | grep -oE '^(CCL|NCCL)_[A-Z0-9_]+' | sed 's/^/-x /') \
    /tmp/hw.sh .dev/ccl-perf "$@" --mem device > $O/$log.txt 2>&1
  echo "$log rc $?: rows $(grep -cE '^ +[0-9]' $O/$log.txt), wrong $(grep -E '^ +[0-9]' $O/$log.txt | awk '{w+=$9; if ($13!="N/A") w+=$13} END {print w+0}')"
  grep -E '^ +[0-9]' $O/$log.txt | awk '{printf "%s:%s/%s ", $1, $8, $12} END {print ""}'
}
for round in 1 2; do
  for op in all_reduce reduce_scatter all_gather broadcast reduce alltoall sendrecv; do
    run $op-nccl-$round $NV CCL_NONE=1 -- $op -b 8M -e 128M -f 4 -n 10 -w 2 -c 1
    run $op-ccl-$round $PWD/.dev CCL_NONE=1 -- $op -b 8M -e 128M -f 4 -n 10 -w 2 -c 1
    run $op-flat-$round $PWD/.dev CCL_HIERARCHY=0 -- $op -b 8M -e 128M -f 4 -n 10 -w 2 -c 1
  done
  run alltoall-a2a-$round $PWD/.dev CCL_HIERARCHY_ALLTOALL=1 -- alltoall -b 8M -e 128M -f 4 -n 10 -w 2 -c 1
done
cd $OUT && tar czf logs.tgz r && rm -rf r
