#!/usr/bin/env bash
# nvidia-h200 (one GPU), carry .dev: captured groups that only copy, copies on copy engines
# (.dev, main) against one copy kernel between the handshake kernels (.dev/gk, branch
# graph-copy-kernel), four ranks as processes under MPS: nccl-tests -G 5 (busbw, #wrong), two
# rounds; then graph_nodes.c (what a graph of 20 calls is made of, us per call graph / eager)
# for all_gather and alltoall at 256 KiB per rank; TWO=1: also nccl-tests with two ranks.
# Summary under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export MPS=1 NCCL_TESTS_DEVICE=0
source tests/gpu/mps.sh
OUT=$OUT/ab NGPU=4 REPS=2 LIBS="main=.dev gk=.dev/gk" EXTRA="-G 5 -b 64K -e 8M -f 2" \
  OPS="all_gather alltoall broadcast gather scatter sendrecv" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
cat "$OUT/ab/nccltests.md"
[ -n "${TWO:-}" ] && OUT=$OUT/ab2 NGPU=2 REPS=2 LIBS="main=.dev gk=.dev/gk" EXTRA="-G 5 -b 64K -e 8M -f 2" \
  OPS="all_gather alltoall sendrecv" bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/graph_nodes.c -L .dev \
  -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -lpthread \
  -o /tmp/graph_nodes > "$OUT/build.log" 2>&1 || echo "graph_nodes: build failed"
for lib in .dev .dev/gk; do
  for op in all_gather alltoall; do
    echo "== $lib $op"
    ONE_GPU=1 NRANKS=4 OP=$op COUNT=65536 LD_LIBRARY_PATH=$PWD/$lib timeout -s KILL 60 /tmp/graph_nodes 2>&1 | grep -a "graph_nodes" | head -4
  done
done
cd "$OUT" && tar czf ab-logs.tgz ab ab2 2>/dev/null; rm -rf ab/nccltests ab2/nccltests
