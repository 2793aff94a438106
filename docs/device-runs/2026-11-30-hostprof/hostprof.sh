#!/usr/bin/env bash
# Where a call's host time goes in libccl: Debian 12's perf (carried in .dev/perf with the
# libraries it needs) samples rank 0's main thread of an nccl-tests -C 1 loop (DWARF call
# graphs; libccl's release build keeps its symbol table), then reports the last 40% of the run
# (the steady loop, after init): self time by shared object and symbol, and inclusive time.
# CASES="op:bytes:iterations ..."; NCCL runs the same loop beside it for its time per call.
# CYCLES=N runs N cycles of 200 calls, each cycle synchronised (nccl-tests -N): the stream's
# queue never fills, so the host's own work is what is sampled (with one long loop of
# ITERATIONS calls, the 2026-11-29 run, cuLaunchKernel waits for the GPU once the queue is full).
# LIBS="nccl ccl=.dev/new base=.dev/base" names the libraries (every one but nccl is sampled).
# One GPU: MPS=1 NCCL_TESTS_DEVICE=0 LIBS="ccl=.dev/new" (both ranks on GPU 0 under an MPS
# daemon of tests/gpu/mps.sh; NVIDIA NCCL refuses ranks sharing a GPU).
#   bash docs/device-runs/2026-11-30-hostprof/hostprof.sh      (carry .dev; OUT=/tmp/out)
set -uo pipefail
O=${OUT:-/tmp/out}/hostprof; mkdir -p "$O"
export NCCL_NVLS_ENABLE=0
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
PL=$PWD/.dev/perf/lib; PERF=$PWD/.dev/perf/perf
bash tests/gpu/nccl_tests_build.sh "$O" || exit 1
source tests/gpu/mps.sh
fwd="${NCCL_TESTS_DEVICE:+-x NCCL_TESTS_DEVICE} ${CUDA_MPS_PIPE_DIRECTORY:+-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY}"
rep() { LD_LIBRARY_PATH=$PL $PERF report -i "$1" --stdio --comms "$2" --time 60%-100% "${@:3}" 2>/dev/null \
  | grep -v "^#" | grep -v "^$"; }
for c in ${CASES:-all_reduce:8:500000 broadcast:8:500000 sendrecv:65536:300000 all_reduce:16777216:40000}; do
  IFS=: read -r op b n <<< "$c"
  loop="-n $n -w 200"; [ -n "${CYCLES:-}" ] && loop="-n 200 -w 20 -N $CYCLES"
  for entry in ${LIBS:-nccl ccl=${LIB:-.dev/new}}; do
    lib=${entry%%=*}; dir=$PWD/${entry#*=}
    [ "$lib" = "$entry" ] && dir=$NV/lib
    f=$O/$op.$b.$lib; rec=""
    [ $lib != nccl ] && rec="LD_LIBRARY_PATH=$PL $PERF record -q -F 4000 --call-graph dwarf,16384 -o $f.data --"
    timeout -s KILL 150 mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE $fwd \
      sh -c "if [ \$OMPI_COMM_WORLD_RANK = 0 ]; then R=\"$rec\"; else R=; fi; eval \$R \
        env LD_LIBRARY_PATH=$dir .dev/nccl-tests/build/${op}_perf -b $b -e $b -C 1 -c 0 $loop" \
      > "$f.log" 2>&1
    echo "== $op $b $lib exit $? : $(grep -E "^ +$b " "$f.log" | head -1)"
    [ -f "$f.data" ] || continue
    { echo "# self, by object"; rep "$f.data" ${op}_perf --no-children --sort dso --percent-limit 1 | head -12
      echo "# self, by symbol"; rep "$f.data" ${op}_perf --no-children --sort dso,sym --percent-limit 0.3 -g none | head -70
      echo "# inclusive, libccl's symbols"; rep "$f.data" ${op}_perf --children --sort sym --percent-limit 0.5 -g none \
        | grep -E "ccl|nccl|Nccl" | head -90; } > "$f.prof.txt"
    head -40 "$f.prof.txt"; rm -f "$f.data"
  done
done
cd "$O" && tar czf "${OUT:-/tmp/out}/hostprof.tgz" *.txt *.log
