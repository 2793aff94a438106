#!/usr/bin/env bash
# What a captured collective is made of and costs against eager, ranks on one GPU under MPS
# (tests/gpu/graph_nodes.c): node types of a graph of 20 calls, us per call graph / eager.
set -uo pipefail
export OUT=${OUT:-/tmp/out} ONE_GPU=1
MPS=1; source tests/gpu/mps.sh
gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/graph_nodes.c -L .dev \
  -Wl,-rpath,$PWD/.dev -l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
  -lcudart -o /tmp/graph_nodes || exit 1
# SETTINGS: name=VAR=value,VAR=value entries, each a run of every case.
SETTINGS=${SETTINGS:-"default= fused0=CCL_GRAPH_FUSED=0"}
for n in ${RANKS:-2 4}; do
  for op in ${OPS:-all_reduce all_gather alltoall broadcast}; do
    for count in ${COUNTS:-16384 262144}; do
      for s in $SETTINGS; do
        name=${s%%=*}; envs=$(echo "${s#*=}" | tr ',' ' ')
        echo "== NRANKS=$n OP=$op COUNT=$count $name ($envs)"
        env $envs NRANKS=$n OP=$op COUNT=$count GRAPH_DOT=$OUT/$op.$n.$count.$name.dot \
          timeout -s KILL 60 /tmp/graph_nodes 2>&1 | grep -a "graph_nodes"
      done
    done
  done
done
