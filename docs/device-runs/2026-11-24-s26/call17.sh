# Call 17: the cuda-ipc host path carrying WHOLE transfers (CCL_IPC_HOST_PATH_*PERMILLE=1000, from
# 1 byte): every byte GPU -> shared pinned ring -> GPU on copy engines, in rounds -- the data path
# a GPU pair without peer access would use -- against the staged path over shared memory
# (NCCL_P2P_DISABLE=1) and the default cuda-ipc path; two ranks under mpirun on the one GPU,
# checked. Then CUDA_DEVICE_MAX_CONNECTIONS=1 (one hardware queue) for the whole-ring runs.
set -u; O=$OUT
W="CCL_IPC_HOST_PATH_PERMILLE=1000 CCL_IPC_HOST_PATH_EXCHANGE_PERMILLE=1000 CCL_IPC_HOST_PATH_MIN_BYTES=1 CCL_IPC_HOST_PATH_EXCHANGE_MIN_BYTES=1"
run() { # label op env...
  local label=$1 op=$2; shift 2
  env "$@" LD_LIBRARY_PATH=$PWD/.dev timeout -s KILL 120 mpirun --allow-run-as-root --bind-to none -np 2 \
    $(env "$@" env | grep -oE '^(CCL|NCCL|CUDA)_[A-Z0-9_]+' | sed 's/^/-x /') -x LD_LIBRARY_PATH \
    .dev/ccl-perf $op -b 8 -e 512M -f 8 -n 10 -w 2 -c 1 --mem device > /tmp/w.$label.$op.log 2>&1
  grep -E '^ +[0-9]' /tmp/w.$label.$op.log | awk -v t="$label $op" '{ w += $9; if ($13 != "N/A") w += $13; printf "%s%s:%s", (n++ ? " " : t ": "), $1, $8 } END { printf "  wrong %d%s\n", w, n ? "" : " (no rows)" }'
}
for op in sendrecv broadcast alltoall all_gather; do
  run ring $op $W NCCL_DEBUG=INFO
  run staged-shm $op NCCL_P2P_DISABLE=1
  run ipc $op
done 2>&1 | tee $O/17-whole-host-path.txt
for op in sendrecv alltoall; do run ring-1q $op $W CUDA_DEVICE_MAX_CONNECTIONS=1; done 2>&1 | tee -a $O/17-whole-host-path.txt
sed 's/\x1b\[[0-9;]*m//g' /tmp/w.ring.sendrecv.log | grep -iE 'host path|through' | head -4 | tee -a $O/17-whole-host-path.txt
