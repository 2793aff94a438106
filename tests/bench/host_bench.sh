#!/usr/bin/env bash
# tests/bench/host_bench.sh LOGDIR -- host-only all_reduce comparison, 2 ranks on one machine:
#   (a) ccl-perf over libccl under mpirun -np 2 (same host: shared memory), and OpenMPI's own
#       MPI_Allreduce (tests/bench/mpi_allreduce.c, btl self,vader) with the same sizes;
#   (b) the same ccl-perf with each rank in its own network namespace (scripts/netns.sh,
#       cclns0 / cclns1, 10.77.0.1 / .2 on veth cclv0 / cclv1), launched without MPI
#       (CCL_RANK, CCL_NRANKS, NCCL_COMM_ID=10.77.0.1:PORT), TCP forced with
#       NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_SOCKET_IFNAME=cclv.
# Prints a markdown table of out-of-place busbw per size (ccl shm, ccl tcp, MPI, ccl-shm/MPI)
# and writes it, with every raw log, to LOGDIR.
#
# Environment:
#   BENCH_ARGS   sizes/iterations for both tools   (default: -b 8 -e 64M -f 4 -n 20 -w 5)
#   NO_BUILD=1   use what is built; LIBDIR / CCL_PERF point at libnccl.so.2 / ccl-perf
#                (default: target/release from scripts/build-lib.sh release)
#   SKIP_NETNS=1 skip (b);  NETNS_IFNAME overrides cclv;  BENCH_TIMEOUT per run (s, 900)
# Exit status: non-zero when a run failed or found wrong elements (the table is still printed).
set -uo pipefail

[ $# -eq 1 ] || { echo "usage: $0 LOGDIR" >&2; exit 2; }
LOG=$(realpath -m "$1")
mkdir -p "$LOG"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
read -r -a ARGS <<<"${BENCH_ARGS:--b 8 -e 64M -f 4 -n 20 -w 5}"
TMO=${BENCH_TIMEOUT:-900}
IFN=${NETNS_IFNAME:-cclv}
status=0
note() { printf 'host_bench: %s\n' "$*" >&2; }

# ---- build -------------------------------------------------------------------------------
if [ -z "${NO_BUILD:-}" ]; then
  if [ -x scripts/build-lib.sh ]; then
    LIBDIR=$ROOT/$(scripts/build-lib.sh release) || { note "build failed"; exit 2; }
  else
    cargo build --release -p ccl-ffi -p ccl-perf >&2 || { note "build failed"; exit 2; }
    LIBDIR=$ROOT/target/release
    [ -e "$LIBDIR/libnccl.so.2" ] || ln -sf libnccl.so "$LIBDIR/libnccl.so.2"
  fi
fi
LIBDIR=${LIBDIR:-$ROOT/target/release}
PERF=${CCL_PERF:-$LIBDIR/ccl-perf}
[ -e "$LIBDIR/libnccl.so.2" ] || { note "no $LIBDIR/libnccl.so.2"; exit 2; }
[ -x "$PERF" ] || { note "no ccl-perf at $PERF"; exit 2; }
mpicc -O2 -o "$LOG/mpi_allreduce" tests/bench/mpi_allreduce.c || { note "mpicc failed"; exit 2; }

MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
{
  echo "# host_bench $(date -u +%FT%TZ) on $(hostname), $(nproc) cores"
  echo "# library: $LIBDIR/libnccl.so.2 ($(readlink -f "$LIBDIR/libnccl.so.2"))"
  echo "# args: ${ARGS[*]}"
} >"$LOG/meta.txt"

run() { # name, command...  (stdout+stderr -> LOG/name.log)
  local name=$1; shift
  note "running $name"
  timeout "$TMO" "$@" >"$LOG/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc" >>"$LOG/meta.txt"
  if [ $rc -ne 0 ]; then note "$name failed (exit $rc, see $LOG/$name.log)"; status=1; fi
}

# ---- (a) shared memory vs MPI ------------------------------------------------------------
run ccl_shm env LD_LIBRARY_PATH="$LIBDIR" "${MPIRUN[@]}" -x LD_LIBRARY_PATH \
  "$PERF" all_reduce "${ARGS[@]}" -c 1 --json "$LOG/ccl_shm.json"
run mpi "${MPIRUN[@]}" --mca btl self,vader "$LOG/mpi_allreduce" "${ARGS[@]}" -c 1

# ---- (b) TCP across network namespaces ---------------------------------------------------
if [ -n "${SKIP_NETNS:-}" ]; then
  note "SKIP_NETNS set: no TCP run"
elif [ ! -x scripts/netns.sh ]; then
  note "scripts/netns.sh missing: no TCP run"
  status=1
else
  created=0
  if ! { ip -n cclns0 link show "${IFN}0" && ip -n cclns1 link show "${IFN}1"; } >/dev/null 2>&1; then
    scripts/netns.sh up 2 >"$LOG/netns.log" 2>&1 || { note "netns.sh up 2 failed (see netns.log)"; status=1; }
    created=1
  fi
  port=$((29000 + RANDOM % 1000))
  pids=()
  for r in 0 1; do
    timeout "$TMO" ip netns exec "cclns$r" env CCL_RANK=$r CCL_NRANKS=2 \
      NCCL_COMM_ID=10.77.0.1:$port NCCL_SOCKET_IFNAME="$IFN" NCCL_SHM_DISABLE=1 \
      NCCL_P2P_DISABLE=1 LD_LIBRARY_PATH="$LIBDIR" \
      "$PERF" all_reduce "${ARGS[@]}" -c 1 --json "$LOG/ccl_tcp.json" \
      >"$LOG/ccl_tcp.rank$r.log" 2>&1 &
    pids+=($!)
  done
  note "running ccl_tcp (ranks in cclns0 / cclns1, NCCL_COMM_ID=10.77.0.1:$port)"
  for r in 0 1; do
    wait "${pids[$r]}"
    rc=$?
    echo "ccl_tcp rank $r: exit $rc" >>"$LOG/meta.txt"
    if [ $rc -ne 0 ]; then note "ccl_tcp rank $r failed (exit $rc, see ccl_tcp.rank$r.log)"; status=1; fi
  done
  cp "$LOG/ccl_tcp.rank0.log" "$LOG/ccl_tcp.log"
  if [ $created -eq 1 ] && [ -z "${KEEP_NETNS:-}" ]; then
    scripts/netns.sh down >>"$LOG/netns.log" 2>&1 || true
  fi
fi

# ---- table -------------------------------------------------------------------------------
# Out-of-place busbw is column 8 in both tools' rows; rows are the lines not starting with #.
busbw() { [ -f "$1" ] && awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ { print $1, $8 }' "$1"; }
busbw "$LOG/ccl_shm.log" >"$LOG/.shm"
busbw "$LOG/ccl_tcp.log" >"$LOG/.tcp" 2>/dev/null || : >"$LOG/.tcp"
busbw "$LOG/mpi.log" >"$LOG/.mpi"
for f in ccl_shm ccl_tcp mpi; do
  if [ -f "$LOG/$f.log" ] && grep -q "Out of bounds values : [1-9]" "$LOG/$f.log"; then
    note "$f reported wrong elements"
    status=1
  fi
done
awk '
  { file = FILENAME ~ /\.shm$/ ? 1 : (FILENAME ~ /\.tcp$/ ? 2 : 3)
    v[file, $1] = $2; if (!($1 in seen)) { seen[$1] = 1; order[n++] = $1 } }
  END {
    print "| size (B) | ccl shm busbw (GB/s) | ccl tcp busbw (GB/s) | MPI busbw (GB/s) | ccl-shm / MPI |"
    print "|---:|---:|---:|---:|---:|"
    for (i = 0; i < n; i++) {
      s = order[i]
      a = ((1, s) in v) ? v[1, s] : "n/a"
      b = ((2, s) in v) ? v[2, s] : "n/a"
      m = ((3, s) in v) ? v[3, s] : "n/a"
      r = (a != "n/a" && m != "n/a" && m + 0 > 0) ? sprintf("%.2f", a / m) : "n/a"
      printf "| %s | %s | %s | %s | %s |\n", s, a, b, m, r
    }
  }' "$LOG/.shm" "$LOG/.tcp" "$LOG/.mpi" >"$LOG/summary.md"
rm -f "$LOG/.shm" "$LOG/.tcp" "$LOG/.mpi"
echo >>"$LOG/summary.md"
for f in ccl_shm ccl_tcp mpi; do
  [ -f "$LOG/$f.log" ] && printf '%-8s %s\n' "$f" "$(grep -h '# Avg bus bandwidth' "$LOG/$f.log" || echo '(no result)')" >>"$LOG/summary.md"
done
cat "$LOG/summary.md"
exit $status
