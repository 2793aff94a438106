# Sourced by device scripts: with MPS=1, start an MPS daemon of the script's own (pipe and log
# under /tmp, quit when the script exits), so that ranks sharing one GPU run side by side
# instead of in time slices. nccl_tests_ab.sh forwards CUDA_MPS_PIPE_DIRECTORY to its ranks.
if [ "${MPS:-0}" = 1 ]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && trap 'echo quit | nvidia-cuda-mps-control' EXIT
fi
