set -u
bash tests/gpu/nccl_tests_build.sh $OUT > /dev/null 2>&1 || { echo build failed; exit 1; }
run1() {
  name=$1; np=$2; shift 2
  fw=""; for kv in "$@"; do fw="$fw -x ${kv%%=*}"; done
  MPS=1 bash -c "source tests/gpu/mps.sh; env $* LD_LIBRARY_PATH=$PWD/.dev/new NCCL_NVLS_ENABLE=0 NCCL_TESTS_DEVICE=0 timeout -s KILL ${T:-60} mpirun --allow-run-as-root --bind-to none -np $np -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x NCCL_TESTS_DEVICE -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY $fw .dev/nccl-tests/build/all_gather_perf -b 2M -e 16M -f 2 -G 5 -n 5 -w 2 -c 1" > $OUT/$name.log 2>&1
  echo "$name exit $?: $(grep -aE '^ +[0-9]+ +[0-9]+ ' $OUT/$name.log | awk '{printf "%s:%s/%s ", $1, $6, $9}')"
}
run1 b16 8 CCL_GRAPH_COPY_BLOCKS=16
run1 b32 8 CCL_GRAPH_COPY_BLOCKS=32
run1 dflt4 4
run1 dflt8 8
