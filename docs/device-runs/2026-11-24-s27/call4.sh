# Call 4: PyTorch on libccl's host-only path: tests/gpu/torch_check.py (every collective PyTorch
# calls, point-to-point, a small DDP run) with two processes on the one GPU, libccl with peer
# access (defaults), host-only (NCCL_P2P_DISABLE=1) and staged (P2P off, CCL_IPC_HOST_ONLY=0);
# torch_compare.py bitwise (two ranks), each against the defaults.
# (Call 4 ran with a timer that needed bc, absent there, and without the host-only log line: fixed after.)
set -u; O=$OUT
export CCL_TORCH_ONE_GPU=1 CCL_TORCH_OUT=/tmp/tc NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
mkdir -p /tmp/tc
{
for set in "p2p:" "hostonly:NCCL_P2P_DISABLE=1" "staged:NCCL_P2P_DISABLE=1,CCL_IPC_HOST_ONLY=0"; do
  name=${set%%:*}; vars=${set#*:}
  start=$(date +%s)
  env ${vars//,/ } LD_PRELOAD=$PWD/.dev/libnccl.so.2 NCCL_DEBUG=INFO timeout -s KILL 200 python3 -m torch.distributed.run \
    --nproc-per-node 2 tests/gpu/torch_check.py $name > /tmp/tc/$name.log 2>&1
  echo "$name: exit $? in $(( $(date +%s) - start )) s; $(sed 's/\x1b\[[0-9;]*m//g' /tmp/tc/$name.log | grep -oE 'cuda-ipc host-only \(|host-only instead|cuda-ipc host path on|cuda-ipc host-only off[^(]*' | sort | uniq -c | tr '\n' ' ')"
  grep -iE "error|traceback|fail" /tmp/tc/$name.log | head -3
done
for b in hostonly staged; do
  echo "== p2p vs $b"; python3 tests/gpu/torch_compare.py /tmp/tc p2p $b 2 2>&1 | tail -n 6
done
} 2>&1 | tee $O/4-torch-host-only.txt
