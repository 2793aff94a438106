#!/usr/bin/env bash
# The next nvidia-h200-x2 calls, one MODE per call (carry .dev: .dev = .dev/new = the build
# measured, with ccl-report; .whl too for MODE=megatron; .dev/nccl-tests = NVIDIA/nccl-tests).
# Order for the next calls: windows (symmetric windows, first on two GPUs), writeall, mailed, megatron with ROUNDS=3 (the runs' clocks are logged now: NCCL
# itself moved 18% between two runs on 2026-12-01), graphbig (captured alltoall and gather at
# 32 MiB, 0.92 / 0.94), reduceab, zerosm, sweep, ctxpush; on four GPUs tests/gpu/device_x4.sh
# first.
#   MODE=windows   nccl-tests -R 2 -x 2 (symmetric windows, NCCL_WIN_COLL_SYMMETRIC; NVIDIA's
#                  copy-engine collectives), nine ops 8 B - 1 GiB: libccl pushing through the
#                  windows (CCL_IPC_SYMMETRIC_WINDOWS=1, the default) against plain
#                  registrations (=0) and NCCL; then -C 1 (host time per call) the same way,
#                  and -g 2 (one thread registering both GPUs' windows in one group)
#   MODE=writeall  SM stores over NVLink against copy engines, no library
#                  (tests/gpu/store_vs_ce.cu); then direct all-reduces whose kernel writes the slice into
#                  every output (CCL_IPC_DIRECT_REDUCE_WRITE_ALL=1) against copy-engine pushes
#                  (the default) and NCCL, 4 MiB - 1 GiB eager, then -C 1 at 16 and 128 MiB
#   MODE=mailed    direct all-reduces and reduce-scatters that wait for nobody
#                  (CCL_IPC_DIRECT_REDUCE_MAILED=1: the first rank's kernel learns the peer's
#                  buffers from a mailbox slot) against the default and NCCL, 4 MiB - 1 GiB, then
#                  -C 1 at 16 and 128 MiB with the host-time verdict
#   MODE=ctxpush   tests/gpu/ctx_push.cu on two GPUs (SKIP_LOCAL=1): can a second context of
#                  the sender's GPU push late into the peer while the caller's stream waits
#                  (no host wait, each GPU pushing its own), with and without
#                  CUDA_DEVICE_MAX_CONNECTIONS=1; a second context costs 523.6 MiB
#   MODE=quick     the regression round's checks and PyTorch only (QUICK=1 device_round.sh)
#   MODE=doneword  a group's end as a stream write into pinned memory (.dev/new of such a
#                  build) against the event record (.dev/prev) and no record (.dev/noev), beside
#                  NCCL; MODE=doneone the same on one H200 under MPS (libccl only), with
#                  two_comms.c and group_comm_order.c (docs/device-runs/2026-12-01-x2/doneword/)
#   MODE=smallops  eager small all_reduce / scatter / gather: .dev/noev and one block per 64 KiB
#   MODE=tpoverlap tp2-sp's 8 MiB all-gather and reduce-scatter beside a bf16 GEMM of 2048,
#                  CUDA_DEVICE_MAX_CONNECTIONS=1: 32 blocks, 8 blocks, copy engines, NCCL
#   MODE=hostcost  host time per call (nccl-tests -C 1) beside NCCL, with libccl's phase lines
#                  (below 1 MiB a call's time is its host time: on b16f48c all-reduces took
#                  6.8-7.4 us, broadcasts 10.0-10.7 and reduce-scatters 9.1-9.8 against NCCL's
#                  7.1-10.3)
#   MODE=hostbisect the exchange ops' host time per call rose from 6.5-7.4 us (2e8e94f,
#                  2026-11-29) to 9.0-10.7 (b16f48c) while all_reduce fell from 9.1 to 7.4 (both
#                  nccl-tests -C 1 beside NCCL): broadcast, all_gather, alltoall and all_reduce
#                  8 B - 32 KiB under every build in .dev/hb-REV (2e8e94f 6a3c48f 245a99c 9743c6f
#                  b16f48c, built by `scripts/dev-build.sh REV hb-REV`) and .dev/new
#   MODE=hostprof  where the host time per call goes, sampled by perf in synchronised cycles of
#                  200 calls (needs .dev/perf: /usr/bin/perf and the libraries ldd lists but
#                  libc, libm, libstdc++, libgcc_s, ld-linux, copied into .dev/perf/lib)
#   MODE=pack      the packed-line limit (CCL_IPC_LL_PACK_BYTES): 64 KiB (the default) against 128
#                  and 256 KiB, 16 KiB - 2 MiB, six ops beside NCCL, captured (-G 10: the GPU's
#                  time alone) and eager. In the 2026-11-30 graph run (9a609d0) each op's time
#                  stepped up ~3 us just above 64 KiB per peer, where the flagged form takes over:
#                  reduce 3.6 -> 6.7 us at 128 KiB (NCCL 5.8), broadcast 3.6 -> 6.8 (6.2), scatter
#                  3.8 -> 7.5 at 256 KiB (6.6): four of the seven captured sizes under 0.95
#   MODE=llbig8    all-reduces, reduces and reduce-scatters of 2 - 32 MiB on the low-latency
#                  kernel up to 8 and 16 MiB (CCL_IPC_LL_BYTES; the default 4 MiB leaves 8 MiB to
#                  copy engines: captured all_reduce 8 MiB 0.936 of NCCL, eager reduce from 8 MiB
#                  0.89-0.95), captured (-G 10) and eager, beside NCCL
#   MODE=graphbig  captured copy-only groups of 8 - 128 MiB (all_gather, alltoall, gather, scatter,
#                  broadcast, sendrecv) on the spread copy kernel up to 32 MiB
#                  (CCL_GRAPH_FUSED_COPY_BYTES) with 64 and 128 blocks, against the default (16
#                  MiB). On 2026-11-30 (4708556, docs/device-runs/2026-11-30-pack/) the kernel to
#                  64 MiB took alltoall 32 MiB from 0.92 to 0.99 (1.02 on 128 blocks) and 64 MiB
#                  from 0.97 to 0.88: 32 MiB may be the limit, if the other ops hold there
#   MODE=exbig     the exchange kernel to 2 / 4 / 8 / 16 MiB per rank (CCL_IPC_LL_EXCHANGE_BYTES),
#                  five data ops 2 - 64 MiB, captured (-G 10) and eager, beside NCCL
#   MODE=p2pbig    sends on the point-to-point kernel of packed lines (8 blocks a side) up to 32
#                  (the default), 64, 128 and 256 KiB (CCL_IPC_P2P_KERNEL_BYTES), eager and
#                  captured sendrecv 8 B - 1 MiB beside NCCL, and .dev/old (8cb0f37: one block a
#                  side, flagged above 16 KiB) at its default: eager sendrecv ran 0.55-0.89 of
#                  NCCL from 16 KiB to 2 MiB on 2026-11-30 (copy engines above 32 KiB)
#   MODE=reduceab  eager reduces of 8 MiB - 1 GiB (0.89-0.95 of NCCL from 16 MiB on 2026-11-30,
#                  731bbb6) as direct reductions (the default: each rank reduces half reading
#                  its peer over NVLink) against the staged protocol (CCL_IPC_DIRECT_REDUCE_BYTES=0:
#                  the non-root pushes on copy engines, the root reduces), and with 4 MiB pieces
#                  (p4: a slice of 8 MiB, the default piece being 16 MiB, is reduced and pushed in
#                  two pieces that overlap, not one after the other), all-reduces too, beside NCCL
#   MODE=zerosm    issue 41's zero-SM check: the zero-SM setting (CCL_IPC_LL_EXCHANGE_BYTES=0),
#                  a bf16 GEMM beside 256 MiB sendrecv / alltoall / all_gather loops
#                  (tests/gpu/device_p2p.sh, overlap.py) beside NCCL, and ncu's list of the
#                  kernels six copy ops launch (libccl's are named ccl_*)
#   MODE=graphs    nine ops 8 B - 1 GiB captured (-G 5) beside NCCL: issue 41's graph criterion
#   MODE=sendrecv  the 8 KiB - 1 MiB send/receive band (0.63-0.80 of NCCL, host-bound: a copy-engine
#                  send costs driver calls): copy engines against CCL_IPC_COPY_KERNEL=1 (wait,
#                  copy and signal in one one-block kernel, one launch), eager, -C 1 and -G 10
#   MODE=llbig     low-latency all-reduces, reduces and reduce-scatters up to 4 MiB
#                  (CCL_IPC_LL_BYTES=4194304) with 32 blocks and with a block per 32 or 16 KiB
#                  (CCL_IPC_LL_BLOCK_BYTES, up to 128 blocks) against the default path and NCCL,
#                  64 KiB - 4 MiB, in graphs (-G 10) then eager
#   MODE=sweep     nine ops 8 B - 1 GiB beside NCCL, the table and plot for PERFORMANCE.md
#   MODE=megatron  Megatron-core tp2-sp at micro-batch 2 and 8 and pp2-1f1b beside NCCL
#   MODE=eagerck   eager exchanges with the receiver's chunk copies as kernels
#                  (CCL_IPC_EAGER_COPY_KERNEL=1) against plain eager and the push wait
#   MODE=eagerprof an nsys GPU trace of a 64 MiB eager exchange against the push wait (if nsys
#                  is there), to see where eager exchanges lose
#   MODE=p2pwide   branch p2p-wide's multi-block point-to-point kernel (.dev/pw) against main's
#                  build and NCCL, sendrecv 4 KiB - 2 MiB
#   MODE=monitor   issue 43's overhead in one run: monitor on / off at 1 MiB and 64 MiB, all_reduce
#                  and sendrecv, on two GPUs (nccl-tests) and on the host backend (carry .dev/net)
#   MODE=oldnew    8 B - 1 MiB of .dev/old beside .dev/new and NCCL, interleaved (host-bound sizes)
#   MODE=spread    captured copy-only groups spread over blocks (CCL_GRAPH_FUSED_COPY_BYTES 1 and
#                  4 MiB) against the default and NCCL, -G 10, 16 KiB - 8 MiB
#   MODE=reorder   the small gathers, reduces, broadcasts of bd00519 / 5e889f9 / f4543a4 / .dev/new,
#                  bd00519 last
#   MODE=hostmon40 host-backend sendrecv 1 MiB, monitor on / off, 40 pairs
#   MODE=monsched  host-backend sendrecv 1 MiB, monitor on / off, HREPS (20) pairs for each
#                  CCL_MONITOR_SCHED of SCHEDS (nice batch idle: how the collector thread yields),
#                  each with one accounting run (the collector's CPU time and dropped records)
#   MODE=montbf    issue 43's drop experiment (tests/bench/monitor_tbf.sh, window 8): nic1 cut to a
#                  quarter for 300 ms under host-backend sendrecv 4 MiB; its summary and SVG
#   MODE=monab     the host monitor's sendrecv 1 MiB cost by default, without its file and with
#                  100 ms passes
#   MODE=mptinflight one-engine multipath links with the 3 MiB in-flight default against 16 MiB,
#                  host memory, 1 / 8 / 64 MiB (carry .dev/net)
#   MODE=eagerslots eager exchanges with more receive slots (CCL_IPC_SLOTS 16) and smaller
#                  chunks (CCL_IPC_CHUNK_BYTES 2 MiB, 16 slots) against plain eager (4 slots of
#                  8 MiB) and the push wait: whether the slot handshake is what eager loses
#   MODE=copyblocks captured copy-only groups on SMs: the four-in-flight copy loop (.dev/new)
#                  against the one before it (.dev/old, same 4 MiB spread limit), 32 against 64
#                  blocks, 16 MiB spread limits, -G 10, 16 KiB - 16 MiB
#   MODE=eagerlanes eager exchanges with 2 and 4 receive streams (CCL_IPC_RX_LANES) against 1
#                  and the push wait: whether the receiver's copies out of its slots (kernels on
#                  SMs) queue behind its own pushes
#   MODE=graphlanes captured copy-only groups above the spread limit with their copies on two
#                  lanes (.dev/new) against one lane (.dev/old), -G 5, 16 MiB - 1 GiB
#   MODE=graphpieces a captured group's copies from partners cut over two copy lanes, its own
#                  copies on the user's stream (.dev/new) against one copy lane each (.dev/b1),
#                  -G 5, 16 MiB - 1 GiB (run on 2026-11-30 with c6674a7 plus the cutting, which
#                  gained nothing and was not merged: docs/device-runs/2026-11-30-graphs/pieces/)
#   MODE=graphpush captured copy-only groups above the spread limit pushed (each rank writes
#                  its partners' receive buffers, .dev/new) against pulled (.dev/b1), -G 5,
#                  16 MiB - 1 GiB
#   MODE=eagerchunks eager sendrecv with larger chunks (CCL_IPC_CHUNK_BYTES 16 MiB x 2 slots, the
#                  default's slot memory, and 32 MiB x 4) against the default (8 MiB x 4) and the
#                  push wait: whether eager transfers pay a fixed cost per chunk
#   MODE=slotchunks what a chunk through receive slots costs with no library
#                  (tests/gpu/slot_chunks.c): 256 MiB in chunks of 2, 8 and 32 MiB, 4 and 16
#                  slots, 1 and 2 sender lanes, against one copy (eager exchanges: 0.68 of the
#                  push wait with 4 x 8 MiB, 0.82-0.88 with 4 x 32 MiB)
#   MODE=kernels   the CUDA backend's GPU tests (.dev/gpu_backend_test: the point-to-point kernel's
#                  random traffic across both GPUs, in place, past the slots, a mismatch; every
#                  kernel against the host), then MODE=p2pbig: first run of the kernel of packed
#                  lines on GPUs
#   MODE=batch2    two ranks' direct copies as one driver batch (CCL_IPC_BATCH_COPIES=1: 3 driver
#                  calls a rank for an all-gather where a lane per direction takes 13, in the
#                  cuda-ipc simulation), and whether a batch lets the later rank of the no-wait
#                  mode move both directions at full speed (lanes halved busbw from 128 MiB): the
#                  probe .dev/ce_both_ways (no library), host time per call (-C 1) at 16 MiB, then
#                  the nine ops 256 KiB - 1 GiB eager beside NCCL (direct reductions of one piece
#                  push as a batch too): default, b1 (batched), nwb1 (batched, no push wait)
#   MODE=bothipc   whether one process moves both directions at full speed through CUDA IPC
#                  mappings (tests/gpu/ipc_bench.c under mpirun: "rank 0 pushes and pulls" on
#                  two streams against "push, both ranks"): the probe with no library did in one
#                  process (docs/device-runs/2026-11-30-batch2/batch2/bothways.md, later-lanes
#                  0.99; but there the driver may run the "pull" on the other GPU's engine),
#                  while libccl's no-wait mode (the later rank pushes and pulls on two lanes)
#                  ran sendrecv, all_gather, alltoall at 0.51-0.68 of the push wait from 16 MiB
#                  (nw/), as p2p/src/engine.rs's RemoteLanes say of a GPU pushing and pulling
#                  (2026-11-23); then the no-wait mode again at 64 and 256 MiB, with its
#                  NCCL_DEBUG=INFO phase lines (which rank copied what, on which lane)
#   MODE=batchgate two ranks' batches under auto (.dev/new: batched unless a group's own blocks
#                  beside its transfers exceed 2 MiB) against .dev/base (a lane per direction):
#                  host time per call at 16 MiB, then nine ops 64 KiB - 1 GiB eager, REPS=2
#   MODE=round     the two-GPU regression round (tests/gpu/device_round.sh on .dev)
#   MODE=eager     eager sends (CCL_IPC_EAGER_SEND=1) against the push wait, one build, beside
#                  NCCL: six ops 8 B - 1 GiB, then Megatron tp2-sp and pp2-1f1b (needs .whl);
#                  first run of b2ed234, which queues a receiver's own copies before the eager
#                  chunks' flag waits (exchanges were 0.47-0.87 of the push wait, one-way
#                  transfers 0.95-1.01: docs/device-runs/2026-11-30-eager/)
set -uo pipefail
O=${OUT:-/tmp/out}
# ab DIR BASE "NAMES": NVIDIA nccl-tests under every library of LIBS (OPS, EXTRA, ENVS_<name>
# from the caller; two GPUs) into $O/DIR within LIMIT seconds, then each of NAMES against BASE,
# or NAME/OTHER against OTHER (the ratio table and #wrong), then the logs packed as
# $O/DIR-logs.tgz.
ab() {
  local dir=$1 base=$2 names=$3 pair n b
  OUT=$O/$dir OPS="$OPS" EXTRA="$EXTRA" LIBS="$LIBS" NGPU=2 timeout "${LIMIT:-240}" \
    bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
  for pair in $names; do
    n=${pair%/*} b=$base
    [ "$pair" = "$n" ] || b=${pair#*/}
    echo "## $n / $b"
    .dev/ccl-report "$O/$dir/nccltests" --base "$b" --lib "$n" 2>&1 | grep -E "^\||wrong"
  done
  if [ -d "$O/$dir" ]; then (cd "$O" && tar czf "$dir-logs.tgz" "$dir" && rm -rf "$dir"); fi
}
# ab_both DIR BASE "NAMES": `ab` captured (EXTRA with -G 10, into DIR-graph) and then eager
# (DIR-eager), each under a heading.
ab_both() {
  local t g
  for t in graph eager; do
    g=""; [ $t = graph ] && g="-G 10"
    echo "### $t"
    EXTRA="$EXTRA $g" ab "$1-$t" "$2" "$3"
  done
}
# eager_ab DIR "NAME:VAR=v,VAR=v ...": eager sends (CCL_IPC_EAGER_SEND=1) by default and with
# each NAME's settings, against the push wait, the one build .dev/new, beside NCCL (OPS, EXTRA).
eager_ab() {
  local dir=$1 set name vars names="" libs="nccl wait=.dev/new eager=.dev/new"
  export ENVS_wait=CCL_IPC_EAGER_SEND=0 ENVS_eager=CCL_IPC_EAGER_SEND=1
  for set in $2; do
    name=${set%%:*} vars=${set#*:}
    export "ENVS_$name=CCL_IPC_EAGER_SEND=1 ${vars//,/ }"
    names="$names $name" libs="$libs $name=.dev/new"
  done
  LIBS=$libs ab "$dir" wait "eager$names"
}
case ${MODE:-hostcost} in
  hostbisect)
    libs="nccl"
    for d in .dev/hb-*; do libs="$libs h${d#.dev/hb-}=$d"; done
    OUT=$O/hb OPS="broadcast all_gather alltoall all_reduce" LIBS="$libs new=.dev/new" NGPU=2 \
      SIZES=${SIZES:-sweep} timeout ${LIMIT:-400} bash tests/gpu/device_host_cost.sh > /dev/null 2>&1
    grep -v "^  rank" "$O/hb/host_cost.md" | head -n 80 ;;
  hostcost)
    OUT=$O/hc LIB=.dev/new LIBS="nccl new=.dev/new" NGPU=2 bash tests/gpu/device_host_cost.sh > /dev/null 2>&1
    grep -v "^  rank" "$O/hc/host_cost.md" | head -n 60
    .dev/ccl-report "$O/hc/ab-sweep/nccltests" --base nccl --lib new --verdict --host 2>&1 | grep -E "PASS|MISS|missed"
    # Synchronised cycles: host time alone (on 2026-11-30 the exchange kernel's calls took
    # 10.5 us against the reduction kernel's 6.2 on two H200s, both 7 us on one H200 in
    # cycles: the GPU's time per exchange may be what paced that loop).
    OUT=$O/hcn CYCLES=50 OPS="all_gather all_reduce alltoall" SIZES="64 65536" LIB=.dev/new \
      LIBS="nccl new=.dev/new" NGPU=2 bash tests/gpu/device_host_cost.sh > /dev/null 2>&1
    grep -v "^  rank" "$O/hcn/host_cost.md" | head -n 40 ;;
  hostprof)
    CYCLES=${CYCLES:-2000} CASES=${CASES:-"all_reduce:8:0 broadcast:8:0 reduce_scatter:1024:0 sendrecv:65536:0"} \
      bash docs/device-runs/2026-11-30-hostprof/hostprof.sh 2>&1 | grep "^==" ;;
  pack)
    export ENVS_pk128=CCL_IPC_LL_PACK_BYTES=131072 ENVS_pk256=CCL_IPC_LL_PACK_BYTES=262144
    OPS=${OPS:-all_reduce broadcast reduce all_gather reduce_scatter alltoall scatter} \
      EXTRA="-b 16K -e 2M -f 2 -n 50 -w 10" LIBS="nccl pk64=.dev/new pk128=.dev/new pk256=.dev/new" \
      ab_both pack nccl "pk64 pk128 pk256" ;;
  windows)
    export ENVS_nowin=CCL_IPC_SYMMETRIC_WINDOWS=0
    OPS="all_gather alltoall broadcast gather scatter sendrecv" EXTRA="-R 2 -x 2 -b 8 -e 1G -f 4 -n 20 -w 5" \
      LIBS="nccl win=.dev/new nowin=.dev/new" ab windows nccl "win nowin win/nowin"
    OPS="all_gather alltoall broadcast" EXTRA="-R 2 -x 2 -C 1 -b 64K -e 64M -f 8 -n 200 -w 20" \
      LIBS="nccl win=.dev/new nowin=.dev/new" ab windows-host nccl "win nowin"
    # One thread registering both GPUs' windows in one group (agreed at ncclGroupEnd).
    for op in all_gather alltoall scatter; do
      LD_LIBRARY_PATH=$PWD/.dev/new timeout 120 .dev/nccl-tests/build/${op}_perf -g 2 -R 2 \
        -b 8 -e 64M -f 8 -c 1 > "$O/windows-g2-$op.log" 2>&1
      echo "-g 2 -R 2 $op exit $?: $(grep -aE 'Out of bounds|wrong' "$O/windows-g2-$op.log" | tail -1)"
    done ;;
  writeall)
    nvcc -O2 -arch=sm_90 -o /tmp/store_vs_ce tests/gpu/store_vs_ce.cu \
      && timeout -s KILL 100 /tmp/store_vs_ce $((1 << 30)) 5 | tee "$O/store_vs_ce.txt"
    export ENVS_wa=CCL_IPC_DIRECT_REDUCE_WRITE_ALL=1
    OPS="all_reduce" EXTRA="-b 4M -e 1G -f 2 -n 20 -w 5" \
      LIBS="nccl wa=.dev/new push=.dev/new" ab writeall nccl "wa push wa/push"
    OPS="all_reduce" EXTRA="-C 1 -b 16M -e 128M -f 8 -n 200 -w 20" \
      LIBS="nccl wa=.dev/new push=.dev/new" ab writeall-host nccl "wa push" ;;
  mailed)
    export ENVS_mail=CCL_IPC_DIRECT_REDUCE_MAILED=1
    OPS="all_reduce reduce_scatter" EXTRA="-b 4M -e 1G -f 2 -n 20 -w 5" \
      LIBS="nccl mail=.dev/new plain=.dev/new" ab mailed nccl "mail plain mail/plain"
    OPS="all_reduce reduce_scatter" EXTRA="-C 1 -b 16M -e 128M -f 8 -n 200 -w 20" \
      LIBS="nccl mail=.dev/new plain=.dev/new" ab mailed-host nccl "mail plain" ;;
  graphbig)
    export ENVS_f32m=CCL_GRAPH_FUSED_COPY_BYTES=33554432 \
      ENVS_f32mb128="CCL_GRAPH_FUSED_COPY_BYTES=33554432 CCL_GRAPH_COPY_BLOCKS=128"
    OPS="alltoall all_gather gather scatter broadcast sendrecv" EXTRA="-b 8M -e 128M -f 2 -n 20 -w 5 -G 10" \
      LIBS="nccl dflt=.dev/new f32m=.dev/new f32mb128=.dev/new" ab graphbig nccl "dflt f32m f32mb128" ;;
  llbig8)
    export ENVS_ll8m=CCL_IPC_LL_BYTES=8388608 ENVS_ll16m=CCL_IPC_LL_BYTES=16777216
    OPS="all_reduce reduce reduce_scatter" EXTRA="-b 2M -e 32M -f 2 -n 50 -w 10" \
      LIBS="nccl ll4m=.dev/new ll8m=.dev/new ll16m=.dev/new" ab_both llbig8 nccl "ll4m ll8m ll16m" ;;
  llbig)
    export ENVS_ll4m=CCL_IPC_LL_BYTES=4194304 ENVS_b32k="CCL_IPC_LL_BYTES=4194304 CCL_IPC_LL_BLOCK_BYTES=32768" \
      ENVS_b16k="CCL_IPC_LL_BYTES=4194304 CCL_IPC_LL_BLOCK_BYTES=16384"
    for g in "-G 10" ""; do
      t=eager; [ -n "$g" ] && t=graph
      OUT=$O/llbig-$t OPS="all_reduce reduce reduce_scatter" NGPU=2 EXTRA="-b 64K -e 4M -f 2 -n 50 -w 10 $g" \
        LIBS="nccl def=.dev/new ll4m=.dev/new b32k=.dev/new b16k=.dev/new" timeout ${LIMIT:-150} \
        bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
      for n in def ll4m b32k b16k; do
        echo "## $t $n"; .dev/ccl-report "$O/llbig-$t/nccltests" --base nccl --lib $n 2>&1 | grep -E "^\|"
      done
    done
    cd "$O" && tar czf llbig-logs.tgz llbig-* && rm -rf llbig-graph llbig-eager ;;
  sendrecv)
    export ENVS_ck=CCL_IPC_COPY_KERNEL=1
    for x in "" "-C 1" "-G 10"; do
      t=eager; [ "$x" = "-C 1" ] && t=host; [ "$x" = "-G 10" ] && t=graph
      OUT=$O/sr-$t OPS=sendrecv NGPU=2 EXTRA="-b 4K -e 4M -f 2 -n 100 -w 10 $x" \
        LIBS="nccl def=.dev/new ck=.dev/new" timeout ${LIMIT:-100} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
      for n in def ck; do
        echo "## $t $n"; .dev/ccl-report "$O/sr-$t/nccltests" --base nccl --lib $n 2>&1 | grep -E "^\|"
      done
    done
    cd "$O" && tar czf sendrecv-logs.tgz sr-* && rm -rf sr-eager sr-host sr-graph ;;
  exbig)
    export ENVS_x2m=CCL_IPC_LL_EXCHANGE_BYTES=2097152 ENVS_x4m=CCL_IPC_LL_EXCHANGE_BYTES=4194304 \
      ENVS_x8m=CCL_IPC_LL_EXCHANGE_BYTES=8388608 ENVS_x16m=CCL_IPC_LL_EXCHANGE_BYTES=16777216
    OPS="all_gather alltoall broadcast gather scatter" EXTRA="-b 2M -e 64M -f 2 -n 30 -w 5" \
      LIBS="nccl x2m=.dev/new x4m=.dev/new x8m=.dev/new x16m=.dev/new" LIMIT=150 \
      ab_both exbig nccl "x2m x4m x8m x16m" ;;
  p2pbig)
    export ENVS_k64=CCL_IPC_P2P_KERNEL_BYTES=65536 ENVS_k128=CCL_IPC_P2P_KERNEL_BYTES=131072 \
      ENVS_k256=CCL_IPC_P2P_KERNEL_BYTES=262144
    OPS=sendrecv EXTRA="-b 8 -e 1M -f 2 -n 50 -w 10" REPS=2 \
      LIBS="nccl old=.dev/old k32=.dev/new k64=.dev/new k128=.dev/new k256=.dev/new" \
      ab_both p2pbig nccl "old k32 k64 k128 k256 k32/old" ;;
  kernels)
    timeout -s KILL 200 .dev/gpu_backend_test --test-threads=1 > "$O/gpu_backend_test.log" 2>&1
    echo "gpu_backend_test: exit $?"; grep -E "^test |test result|panicked" "$O/gpu_backend_test.log"
    MODE=p2pbig LIMIT=180 bash "$0" ;;
  bothipc)
    mpicc -O2 tests/gpu/ipc_bench.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart \
      -o /tmp/ipc_bench && timeout 60 mpirun --allow-run-as-root --bind-to none -np 2 /tmp/ipc_bench \
      2>&1 | tee "$O/ipc_bench.txt"
    export ENVS_nw="CCL_IPC_PUSH_WAIT_US=0 CCL_IPC_PUSH_WAIT_BUSY_US=0 CCL_IPC_EXCHANGE_WAIT_US=0 CCL_IPC_DIRECT_REDUCE_TAKEOVER_US=0"
    export ENVS_nwdbg="$ENVS_nw NCCL_DEBUG=INFO"
    OPS="sendrecv all_gather" EXTRA="-b 64M -e 256M -f 4 -n 20 -w 5" \
      LIBS="nccl new=.dev/new nw=.dev/new nwdbg=.dev/new" LIMIT=120 ab bothipc nccl "nw/new nwdbg/new" ;;
  doneword)
    # A group's end as a stream write of its number into pinned memory (.dev/new) against the
    # event record (.dev/prev) and against no record (.dev/noev, every 64th group): eager
    # small operations and host time per call (-C 1) beside NCCL.
    OPS="all_reduce scatter sendrecv" EXTRA="-b 8 -e 128K -f 4 -n 50 -w 10" LIMIT=140 \
      LIBS="nccl prev=.dev/prev new=.dev/new noev=.dev/noev" ab doneword nccl "prev new noev new/prev"
    OPS="all_reduce scatter sendrecv" EXTRA="-b 8 -e 128K -f 4 -n 50 -w 10 -C 1" LIMIT=120 \
      LIBS="nccl prev=.dev/prev new=.dev/new noev=.dev/noev" ab donewordC nccl "prev new noev new/prev" ;;
  ctxpush)
    nvcc -O2 -arch=sm_90 -o /tmp/ctx_push tests/gpu/ctx_push.cu -lcuda > "$O/ctx_push.build.log" 2>&1
    SKIP_LOCAL=1 timeout 120 /tmp/ctx_push 5 2>&1 | tee "$O/ctx_push.txt"
    CUDA_DEVICE_MAX_CONNECTIONS=1 SKIP_LOCAL=1 timeout 120 /tmp/ctx_push 5 2>&1 | tee -a "$O/ctx_push.txt" ;;
  doneone)
    # MODE=doneword where only one H200 is lent: two ranks on GPU 0 under MPS (libccl only:
    # NVIDIA NCCL refuses two ranks on one GPU), host time per call (-C 1) and eager, then the
    # stream and communicator switches of two_comms.c and group_comm_order.c on that GPU.
    MPS=1; source tests/gpu/mps.sh; export NCCL_TESTS_DEVICE=0
    # NB=1: also .dev/nb (the write without its memory barrier).
    libs="prev=.dev/prev new=.dev/new noev=.dev/noev${NB:+ nb=.dev/nb}"
    OPS=${DONE_OPS:-all_reduce scatter sendrecv} EXTRA="-b 8 -e 128K -f 4 -n 50 -w 10 -C 1" \
      LIMIT=110 LIBS=$libs ab doneoneC prev "new noev new/noev${NB:+ nb nb/new}"
    OPS=${DONE_OPS:-all_reduce scatter sendrecv} EXTRA="-b 8 -e 128K -f 4 -n 50 -w 10" LIMIT=110 \
      LIBS=$libs ab doneone prev "new noev new/noev${NB:+ nb nb/new}"
    [ "${SKIP_CHECKS:-0}" = 1 ] && exit 0
    inc="-O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include -L $PWD/.dev -Wl,-rpath,$PWD/.dev"
    cuda="-l:libnccl.so.2 -L /usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart"
    gcc $inc tests/gpu/two_comms.c $cuda -lpthread -o /tmp/two_comms &&
      TWO_COMMS_ONE_GPU=1 timeout -s KILL 90 /tmp/two_comms 5000 2>&1 | grep -E "PASS|FAIL|SKIP"
    mpicc $inc tests/gpu/group_comm_order.c $cuda -o /tmp/group_comm_order &&
      for x in CCL_IPC_DISABLE=0 CCL_IPC_DISABLE=1; do
        timeout -s KILL 90 mpirun --allow-run-as-root --bind-to none -np 2 -x ONE_GPU=1 -x $x \
          -x CUDA_MPS_PIPE_DIRECTORY /tmp/group_comm_order 2>&1 | grep -E "PASS|FAIL" | head -n 3
      done ;;
  smallops)
    # Eager small operations (all_reduce 8 B - 128 KiB 0.64-0.92 of NCCL, scatter 0.78-0.94,
    # where captured they run 1.5-1.7x): with the communicator's completion event recorded
    # only every 64th group (.dev/noev, an experiment build), and with one block per 64 KiB
    # (bb) against the default 32 blocks; eager, then host time per call (-C 1).
    export ENVS_bb=CCL_IPC_LL_BLOCK_BYTES=65536
    OPS="all_reduce scatter gather" EXTRA="-b 8 -e 256K -f 4 -n 50 -w 10" LIMIT=150 \
      LIBS="nccl new=.dev/new noev=.dev/noev bb=.dev/new" ab smallops nccl "new noev bb noev/new bb/new"
    OPS="all_reduce scatter" EXTRA="-b 8 -e 256K -f 4 -n 50 -w 10 -C 1" LIMIT=100 \
      LIBS="nccl new=.dev/new noev=.dev/noev bb=.dev/new" ab smallopsC nccl "new noev bb" ;;
  tpoverlap)
    # Megatron tp2-sp's collectives (8 MiB all-gathers and reduce-scatters, on the kernels)
    # beside a bf16 GEMM of 2048 (tests/gpu/overlap.py) under CUDA_DEVICE_MAX_CONNECTIONS=1:
    # what each costs the GEMM with 32 blocks (the default), 8 (ccl8), copy engines (cce).
    for v in nccl ccl "ccl8:CCL_IPC_LL_BLOCK_BYTES=524288" \
      "cce:CCL_IPC_LL_EXCHANGE_BYTES=0 CCL_IPC_LL_BYTES=1048576"; do
      name=${v%%:*} vars=""; [ "$name" = "$v" ] || vars=${v#*:}
      pre=""; [ "$name" = nccl ] || pre=LD_PRELOAD=$PWD/.dev/new/libnccl.so.2
      env CUDA_DEVICE_MAX_CONNECTIONS=1 OVERLAP_BYTES=${OVERLAP_BYTES:-8388608} OVERLAP_GEMM_N=2048 \
        OVERLAP_SECONDS=1 OVERLAP_COLLS="all_gather reduce_scatter" $pre $vars timeout 150 \
        python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/overlap.py "$name" 2>&1 |
        grep -E "^OVERLAP|Error|error" | head -n 6 | tee -a "$O/tpoverlap.txt"
    done ;;
  batchgate)
    OUT=$O/bhc LIBS="nccl base=.dev/base new=.dev/new" NGPU=2 SIZES="16M" \
      timeout 150 bash tests/gpu/device_host_cost.sh > /dev/null 2>&1
    grep -v "^  rank" "$O/bhc/host_cost.md" | grep -A30 "host us per call"
    OPS="sendrecv all_gather alltoall broadcast gather scatter all_reduce reduce_scatter reduce" \
      EXTRA="-b 64K -e 1G -f 4 -n 20 -w 5" LIBS="nccl base=.dev/base new=.dev/new" REPS=2 \
      LIMIT=300 ab batchgate nccl "base new new/base" ;;
  batch2)
    timeout 60 .dev/ce_both_ways 2>&1 | tee "$O/bothways.md"
    export ENVS_batch="NCCL_DEBUG=INFO CCL_IPC_BATCH_COPIES=1" ENVS_b1=CCL_IPC_BATCH_COPIES=1
    export ENVS_nwb1="CCL_IPC_BATCH_COPIES=1 CCL_IPC_PUSH_WAIT_US=0 CCL_IPC_PUSH_WAIT_BUSY_US=0 CCL_IPC_EXCHANGE_WAIT_US=0 CCL_IPC_DIRECT_REDUCE_TAKEOVER_US=0"
    OUT=$O/bhc LIBS="nccl default=.dev/new batch=.dev/new" NGPU=2 SIZES="16M" \
      timeout 150 bash tests/gpu/device_host_cost.sh > /dev/null 2>&1
    grep -v "^  rank" "$O/bhc/host_cost.md" | head -n 40
    OPS="sendrecv all_gather alltoall broadcast gather scatter all_reduce reduce_scatter reduce" \
      EXTRA="-b 256K -e 1G -f 4 -n 20 -w 5" LIBS="nccl new=.dev/new b1=.dev/new nwb1=.dev/new" \
      LIMIT=330 ab batch2 nccl "new b1 nwb1 b1/new nwb1/new" ;;
  reduceab)
    export ENVS_staged=CCL_IPC_DIRECT_REDUCE_BYTES=0 ENVS_p4=CCL_IPC_DIRECT_REDUCE_PIECE_BYTES=4194304
    OPS="reduce all_reduce" EXTRA="-b 8M -e 1G -f 2 -n 20 -w 5" REPS=2 \
      LIBS="nccl direct=.dev/new staged=.dev/new p4=.dev/new" ab reduceab nccl "direct staged p4 p4/direct" ;;
  zerosm)
    CCL_IPC_LL_EXCHANGE_BYTES=0 SKIP_PP=1 NCU=1 OVERLAP_COLLS="sendrecv alltoall all_gather" OUT=$O/zsm \
      timeout ${LIMIT:-500} bash tests/gpu/device_p2p.sh > /dev/null 2>&1
    cat "$O/zsm/p2p_summary.md" ;;
  sendsmall)
    export ENVS_newold="CCL_IPC_LL_BYTES=4194304 CCL_IPC_LL_PACK_BYTES=65536"
    OPS=sendrecv EXTRA="-b 8 -e 64K -f 2 -n 50 -w 10 -G 5" REPS=2 \
      LIBS="nccl old=.dev/old new=.dev/new newold=.dev/new" ab sendsmall nccl "old new newold new/old" ;;
  graphs)
    OUT=$O/graphs LIBS="nccl ccl=.dev/new" NGPU=2 EXTRA="-b 8 -e 1G -f 2 -n 20 -w 5 -G 5" \
      timeout ${LIMIT:-420} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    .dev/ccl-report "$O/graphs/nccltests" --base nccl --lib ccl --verdict --graphs > "$O/graphs.md" 2>&1
    cat "$O/graphs.md"; cd "$O" && tar czf graphs-logs.tgz graphs && rm -rf graphs ;;
  sweep)
    OUT=$O/sweep LIBS="nccl ccl=.dev/new" NGPU=2 EXTRA="-b 8 -e 1G -f 2 -n 20 -w 5" \
      timeout ${LIMIT:-300} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    .dev/ccl-report "$O/sweep/nccltests" --base nccl --lib ccl --plot "$O/nccl-tests-x2.png" \
      --plot "$O/nccl-tests-x2.svg" --verdict > "$O/sweep.md" 2>&1
    cat "$O/sweep.md"; cd "$O" && tar czf sweep-logs.tgz sweep && rm -rf sweep ;;
  megatron)
    # MBS="2" ROUNDS=2 ITERS=20: one micro-batch, both libraries twice interleaved (single
    # runs of one configuration moved 10-20% between calls, for both libraries). MLIBS="nccl
    # ccl ccl-b" with CCL_ENV_B (exported) adds a run of other settings; CONFIGS narrows.
    for mb in ${MBS:-2 8}; do
      MICRO_BATCH=$mb LIBS="${MLIBS:-nccl ccl}" CONFIGS="${CONFIGS:-tp2-sp pp2-1f1b}" \
        ITERS=${ITERS:-30} ROUNDS=${ROUNDS:-1} \
        LIBCCL=$PWD/.dev/new/libnccl.so.2 \
        CCL_ENV=NCCL_DEBUG=INFO OUT=$O/mb$mb bash tests/megatron/run.sh > "$O/mb$mb.out" 2>&1
      # libccl's account (host time queueing, push waits) first: the logs may not come back.
      grep -E "cuda-ipc queued|posted before" "$O/mb$mb.out" | head -n 8; tail -n 12 "$O/mb$mb.out"
    done ;;
  p2pwide)
    # Branch p2p-wide in .dev/pw: the point-to-point kernel on several blocks a side (one per
    # 32 KiB), 1 MiB slots; CCL_IPC_P2P_KERNEL_BYTES 32 KiB (its default) against 128 KiB,
    # 512 KiB and 1 MiB, and main's build (.dev/new), sendrecv 4 KiB - 2 MiB eager and -C 1,
    # beside NCCL. Regression checks of the wide kernel first:
    # `LIBDIR=.dev/pw P2P=1048576 bash docs/device-runs/2026-11-30-p2p64k/check.sh`.
    export ENVS_k128=CCL_IPC_P2P_KERNEL_BYTES=131072 ENVS_k512=CCL_IPC_P2P_KERNEL_BYTES=524288 \
      ENVS_k1m=CCL_IPC_P2P_KERNEL_BYTES=1048576
    for x in "" "-C 1"; do
      t=eager; [ -n "$x" ] && t=host
      OUT=$O/pw-$t OPS=sendrecv NGPU=2 EXTRA="-b 4K -e 2M -f 2 -n 100 -w 10 $x" \
        LIBS="nccl main=.dev/new k32=.dev/pw k128=.dev/pw k512=.dev/pw k1m=.dev/pw" timeout ${LIMIT:-150} \
        bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
      for n in main k32 k128 k512 k1m; do
        echo "## $t $n"; .dev/ccl-report "$O/pw-$t/nccltests" --base nccl --lib $n 2>&1 | grep -E "^\||wrong"
      done
    done
    cd "$O" && tar czf pw-logs.tgz pw-* && rm -rf pw-eager pw-host ;;
  eagerck)
    # Eager exchanges with the receiver's copies out of its slots as one kernel a chunk
    # (CCL_IPC_EAGER_COPY_KERNEL=1) against plain eager and the push wait, 8 KiB - 512 MiB.
    OPS="sendrecv all_gather alltoall" EXTRA="-b 8K -e 512M -f 4 -n 20 -w 5" \
      eager_ab eck "eck:CCL_IPC_EAGER_COPY_KERNEL=1" ;;
  eagerprof)
    # Where an eager exchange loses (0.49-0.90 of the push wait from 8 MiB): a GPU trace of
    # sendrecv at 64 MiB, eager (CCL_IPC_EAGER_SEND=1) and push wait, under nsys where the
    # machine has it (every copy, kernel and stream wait with its stream and times).
    NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n 1)
    echo "nsys: ${NSYS:-none}; ncu: $(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo none)"
    [ -n "$NSYS" ] || exit 0
    bash tests/gpu/nccl_tests_build.sh "$O" > /dev/null 2>&1
    for e in 1 0; do
      CCL_IPC_EAGER_SEND=$e LD_LIBRARY_PATH=$PWD/.dev/new timeout 120 mpirun --allow-run-as-root --bind-to none \
        -np 2 -x LD_LIBRARY_PATH -x CCL_IPC_EAGER_SEND "$NSYS" profile -t cuda -o "$O/eager$e.%q{OMPI_COMM_WORLD_RANK}" \
        .dev/nccl-tests/build/sendrecv_perf -b 64M -e 64M -n 5 -w 2 -c 0 > "$O/eager$e.log" 2>&1
      for r in 0 1; do
        "$NSYS" stats -q -r cuda_gpu_trace -f csv -o "$O/eager$e.r$r" "$O/eager$e.$r.nsys-rep" > /dev/null 2>&1
      done
      grep -E "^ +[0-9]" "$O/eager$e.log"
    done
    ls -la "$O" | head -n 20 ;;
  eager) MODE=both LIMIT=240 DEADLINE=300 bash docs/device-runs/2026-11-30-eager/eager_x2.sh ;;
  # The whole round takes more than 330 s on two H200s: give it a call of its own (timeout_s 600).
  monitor) SIZES="1M 64M" PART="gpumon hostmon" REPS=4 GPUMON_S=240 HREPS=10 HOSTMON_S=330 \
    OUT=$O bash docs/device-runs/2026-11-30-quiet/run.sh ;;
  oldnew)
    # The sizes up to 1 MiB, where a call's time is its host time, of the build in .dev/old
    # (say bd00519) beside .dev/new and NCCL, interleaved REPS times: whether libccl's small
    # ratios moved between two sweeps because of libccl or because NCCL's time per call did.
    OUT=$O/on OPS="${OPS:-reduce sendrecv scatter gather all_gather broadcast all_reduce}" NGPU=2 \
      REPS=${REPS:-2} EXTRA="-b 8 -e 1M -f 4 -n 50 -w 10" LIBS="nccl old=.dev/old new=.dev/new" \
      timeout ${LIMIT:-240} bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    for n in old new; do
      echo "## $n / nccl"; .dev/ccl-report "$O/on/nccltests" --base nccl --lib $n 2>&1 | grep -E "^\||wrong"
    done
    echo "## new / old"; .dev/ccl-report "$O/on/nccltests" --base old --lib new 2>&1 | grep -E "^\||wrong"
    cd "$O" && tar czf oldnew-logs.tgz on && rm -rf on ;;
  spread)
    # Captured copy-only groups as one kernel spread over blocks (CCL_GRAPH_FUSED_COPY_BYTES)
    # against the one-block limit, -G 10, 16 KiB - 8 MiB.
    export ENVS_def=CCL_GRAPH_FUSED_COPY_BYTES=65536 ENVS_s1m=CCL_GRAPH_FUSED_COPY_BYTES=1048576 \
      ENVS_s4m=CCL_GRAPH_FUSED_COPY_BYTES=4194304
    OPS="sendrecv broadcast scatter gather all_gather alltoall" EXTRA="-b 16K -e 8M -f 2 -n 50 -w 10 -G 10" \
      LIBS="nccl def=.dev/new s1m=.dev/new s4m=.dev/new" LIMIT=${LIMIT:-300} ab sp nccl "def s1m s4m" ;;
  reorder)
    # The small gathers' 0.71-0.80 of bd00519 (docs/device-runs/2026-11-30-x2-f83ccce/bisect.md),
    # with bd00519 run last instead of first and twice interleaved: the builds by
    # `scripts/dev-build.sh bd00519 old`, `... 5e889f9 b1`, `... f4543a4 b2` (leave .dev/perf
    # out of the carry: 64 MiB).
    OUT=$O/ro OPS="gather reduce broadcast" NGPU=2 REPS=${REPS:-2} EXTRA="-b 8 -e 128K -f 4 -n 50 -w 10" \
      LIBS="nccl new=.dev/new b2=.dev/b2 b1=.dev/b1 old=.dev/old" timeout ${LIMIT:-240} \
      bash tests/gpu/nccl_tests_ab.sh > /dev/null 2>&1
    for n in b1 b2 new; do
      echo "## $n / old"; .dev/ccl-report "$O/ro/nccltests" --base old --lib $n 2>&1 | grep -E "^\||wrong"
    done
    cd "$O" && tar czf reorder-logs.tgz ro && rm -rf ro ;;
  hostmon40)
    # Issue 43's open case alone with many pairs: host-backend sendrecv 1 MiB, monitor on / off,
    # HREPS (40) pairs on the idle cores (a run's busbw moved 1.1-2.2 GB/s within one setting).
    export PATH=$PWD/.dev/net/bin:$PATH; mkdir -p "$O"
    OPS=sendrecv SIZES=1M REPS=${HREPS:-40} LIBDIR=.dev FILE=1 timeout ${LIMIT:-500} \
      bash tests/bench/monitor_overhead.sh "$O/m40" > "$O/hostmon40.txt" 2>&1
    grep -E "^sendrecv" "$O/hostmon40.txt"; rm -rf "$O/m40" ;;
  monsched)
    export PATH=$PWD/.dev/net/bin:$PATH; mkdir -p "$O"
    for name in ${SCHEDS:-nice batch idle}; do
      echo "== $name"
      ON_ENV=CCL_MONITOR_SCHED=$name ACCOUNT=1 OPS=sendrecv SIZES=1M REPS=${HREPS:-20} LIBDIR=.dev \
        timeout ${LIMIT:-170} bash tests/bench/monitor_overhead.sh "$O/ms-$name" > "$O/monsched-$name.txt" 2>&1
      grep -E "^sendrecv" "$O/monsched-$name.txt" | tail -2
      sed 's/\x1b\[[0-9;]*m//g' "$O/ms-$name"/*account*.log | grep -o 'cpu_us=.*passes=[0-9]*'
      rm -rf "$O/ms-$name"
    done ;;
  montbf)
    export PATH=$PWD/.dev/net/bin:$PATH; mkdir -p "$O"
    CCL_MONITOR_FILE_BYTES=2147483648 LIBDIR=.dev ITERS=2500 FIGS=tbf timeout ${LIMIT:-150} \
      bash tests/bench/monitor_tbf.sh "$O/tbf" > "$O/monitor_tbf.out" 2>&1
    cp "$O/tbf/summary.txt" "$O/monitor_tbf_summary.txt"; cp docs/monitor-tbf.svg "$O/" 2>/dev/null
    rm -rf "$O/tbf"; cat "$O/monitor_tbf_summary.txt" ;;
  mptinflight)
    # The 3 MiB in-flight default on the idle cores: links of one engine (CCL_MPT_ENGINES=1,
    # as ranks with many links to other hosts get) with 6 frames in flight against the earlier
    # 16, host memory, 1 / 8 / 64 MiB (on the 2-core machine 6 won at 1 and 8 MiB).
    export PATH=$PWD/.dev/net/bin:$PATH; mkdir -p "$O"
    SETS="default:CCL_MPT_ENGINES=1 old16M:CCL_MPT_ENGINES=1,CCL_MPT_INFLIGHT_BYTES=16777216" \
      PIN=0 SIZES="1M 8M 64M" ROUNDS=${ROUNDS:-4} LIBDIR=.dev timeout ${LIMIT:-400} \
      bash tests/bench/mpt_settings_ab.sh "$O/inflight" > /dev/null 2>&1
    cat "$O/inflight/summary.txt" ;;
  monab)
    # What the host monitor's cost at sendrecv 1 MiB (0.974-0.983 busbw in four runs) comes
    # from: the monitored runs as by default (JSON file, 10 ms passes), without the file, and
    # with a pass every 100 ms, HREPS pairs each, on the idle cores (carry .dev/net).
    export PATH=$PWD/.dev/net/bin:$PATH; mkdir -p "$O"
    for v in "file:1:" "nofile:0:" "poll100ms:1:CCL_MONITOR_POLL_US=100000"; do
      IFS=: read -r name file env <<< "$v"
      echo "== $name"
      FILE=$file ON_ENV=$env OPS=sendrecv SIZES=1M REPS=${HREPS:-12} LIBDIR=.dev timeout ${LIMIT:-150} \
        bash tests/bench/monitor_overhead.sh "$O/mon-$name" > "$O/monab-$name.txt" 2>&1
      grep -E "^sendrecv" "$O/monab-$name.txt"; rm -rf "$O/mon-$name"
    done ;;
  eagerslots)
    # 16 slots (every chunk of a 64 MiB message in flight at once) and 16 slots of 2 MiB (the
    # default's slot memory, shorter steps) against the default's 4 slots of 8 MiB.
    OPS="sendrecv all_gather alltoall" EXTRA="-b 1M -e 512M -f 4 -n 20 -w 5" LIMIT=${LIMIT:-270} \
      eager_ab es "s16:CCL_IPC_SLOTS=16 s16c2m:CCL_IPC_SLOTS=16,CCL_IPC_CHUNK_BYTES=2097152" ;;
  copyblocks)
    export ENVS_old4m=CCL_GRAPH_FUSED_COPY_BYTES=4194304 \
      ENVS_new="CCL_GRAPH_FUSED_COPY_BYTES=4194304 CCL_GRAPH_COPY_BLOCKS=32" \
      ENVS_b64="CCL_GRAPH_FUSED_COPY_BYTES=4194304 CCL_GRAPH_COPY_BLOCKS=64" \
      ENVS_s16b64="CCL_GRAPH_FUSED_COPY_BYTES=16777216 CCL_GRAPH_COPY_BLOCKS=64" \
      ENVS_s16b128="CCL_GRAPH_FUSED_COPY_BYTES=16777216 CCL_GRAPH_COPY_BLOCKS=128"
    OPS="sendrecv broadcast scatter gather all_gather alltoall" EXTRA="-b 16K -e 16M -f 2 -n 50 -w 10 -G 10" \
      LIBS="nccl old4m=.dev/old new=.dev/new b64=.dev/new s16b64=.dev/new s16b128=.dev/new" \
      LIMIT=${LIMIT:-300} ab cb nccl "old4m new b64 s16b64 s16b128" ;;
  eagerlanes)
    OPS="sendrecv all_gather alltoall" EXTRA="-b 4M -e 256M -f 4 -n 20 -w 5" LIMIT=${LIMIT:-200} \
      eager_ab el "rx2:CCL_IPC_RX_LANES=2 rx4:CCL_IPC_RX_LANES=4" ;;
  graphlanes)
    OPS="all_gather alltoall gather broadcast scatter sendrecv" EXTRA="-b 16M -e 1G -f 2 -n 20 -w 5 -G 5" \
      LIBS="nccl old=.dev/old new=.dev/new" LIMIT=${LIMIT:-200} ab gl nccl "old new" ;;
  graphpieces)
    OPS="all_gather alltoall gather broadcast scatter sendrecv" EXTRA="-b 16M -e 1G -f 2 -n 20 -w 5 -G 5" \
      LIBS="nccl b1=.dev/b1 new=.dev/new" LIMIT=${LIMIT:-200} ab gp nccl "b1 new new/b1" ;;
  graphpush)
    OPS="${OPS:-all_gather alltoall gather broadcast scatter sendrecv}" \
      EXTRA="-b 16M -e 1G -f 2 -n 20 -w 5 -G 5" LIBS="nccl b1=.dev/b1 new=.dev/new" \
      LIMIT=${LIMIT:-200} ab gh nccl "b1 new new/b1" ;;
  eagerchunks)
    OPS="${OPS:-sendrecv}" EXTRA="-b 16M -e 256M -f 4 -n 20 -w 5" LIMIT=${LIMIT:-120} eager_ab ec \
      "c16s2:CCL_IPC_CHUNK_BYTES=16777216,CCL_IPC_SLOTS=2 c32s4:CCL_IPC_CHUNK_BYTES=33554432,CCL_IPC_SLOTS=4" ;;
  slotchunks)
    gcc -O2 -I/usr/local/cuda/include tests/gpu/slot_chunks.c -L/usr/local/cuda/lib64 -lcuda \
      -o /tmp/slot_chunks || exit 1
    for cfg in 2097152:4:2 8388608:4:2 8388608:16:2 8388608:4:1 33554432:4:2; do
      IFS=: read -r c sl ln <<< "$cfg"
      BYTES=268435456 CHUNK=$c SLOTS=$sl LANES=$ln timeout 60 /tmp/slot_chunks
    done 2>&1 | tee "$O/slotchunks.txt" ;;
  round) OUT=$O NGPU=2 bash tests/gpu/device_round.sh > /dev/null 2>&1; cat "$O/summary.md" ;;
  quick) OUT=$O NGPU=2 QUICK=1 bash tests/gpu/device_round.sh > /dev/null 2>&1; cat "$O/summary.md" ;;
esac
