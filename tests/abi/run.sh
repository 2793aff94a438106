#!/usr/bin/env bash
# tests/abi/run.sh [options] [LIBDIR] -- the C ABI test layer (DESIGN.md "Testing layers" 4).
#
#   tests/abi/run.sh                 # library in target/debug (cargo build -p ccl-ffi)
#   tests/abi/run.sh target/release
#   tests/abi/run.sh --quick         # smaller coll_check (counts up to 1000, root 0)
#   tests/abi/run.sh --no-netns      # skip the network-namespace run
#   tests/abi/run.sh --no-one-host   # skip the one-host run (step 4)
#   tests/abi/run.sh --keep-netns    # leave cclns0/cclns1/cclhub up afterwards
#   tests/abi/run.sh --mock          # self-test of these scripts: build tests/abi/mock_nccl.c
#                                    # (an MPI-based stand-in) as the library and run everything
#
# Steps (each prints its own "N passed, M failed" line; the script exits 1 if any step fails):
#   1. build into target/abi/: header compile checks (gcc -std=c99 -pedantic, g++ -std=c++11,
#      both -Wall -Wextra -Werror, also with CCL_CONFIG_V2_30; ccl_ext.h too), abi_check,
#      abi_check_230, ext_check, coll_check (mpicc);
#   2. check_symbols.sh (header <-> symbols.txt <-> exports of LIBDIR/libnccl.so.2);
#   3. abi_check, abi_check_230 and ext_check (libccl's own functions, ccl_ext.h);
#   4. coll_check, 4 ranks on one host: the library uses shared memory between ranks;
#   5. coll_check, 4 ranks in two network namespaces (ranks 0,1 in cclns0, 2,3 in cclns1):
#      shared memory inside a namespace, TCP across.
#
# Environment: NP (ranks, default 4), COLL_TIMEOUT (seconds per mpirun, default 1800),
# COLL_CHECK_* (passed through to coll_check), CCL_*/NCCL_* (passed through to the library).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
QUICK=0 NETNS=1 ONE_HOST=1 KEEP_NETNS=0 MOCK=0 LIBDIR=
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    --no-netns) NETNS=0 ;;
    --no-one-host) ONE_HOST=0 ;;
    --keep-netns) KEEP_NETNS=1 ;;
    --mock) MOCK=1 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $a" >&2; exit 2 ;;
    *) LIBDIR=$a ;;
  esac
done
LIBDIR=${LIBDIR:-target/debug}
OUT=$ROOT/target/abi
NP=${NP:-4}
COLL_TIMEOUT=${COLL_TIMEOUT:-1800}
mkdir -p "$OUT"

declare -a SUMMARY=()
FAILED=0
step() { echo; echo "==== $*"; }
result() { # name rc
  if [ "$2" -eq 0 ]; then SUMMARY+=("PASS  $1"); else SUMMARY+=("FAIL  $1 (exit $2)"); FAILED=1; fi
}

# ----------------------------------------------------------------------------- library
if [ "$MOCK" -eq 1 ]; then
  step "building the MPI stand-in library (tests/abi/mock_nccl.c) into target/abi/mock"
  LIBDIR=$OUT/mock
  mkdir -p "$LIBDIR"
  mpicc -std=gnu11 -O2 -Wall -Wextra -Werror -shared -fPIC -Wl,-soname,libnccl.so.2 \
    -I ffi/include tests/abi/mock_nccl.c -lm -o "$LIBDIR/libnccl.so.2" || exit 1
  ln -sf libnccl.so.2 "$LIBDIR/libnccl.so"
fi
LIBDIR=$(cd "$LIBDIR" 2>/dev/null && pwd) || { echo "run.sh: no library dir $LIBDIR (build with: cargo build -p ccl-ffi)"; exit 1; }
# Programs link with -lnccl (needs libnccl.so) and load libnccl.so.2 (the SONAME) at run time.
# If one of the two names is missing, that is recorded as a failure, and a private link in
# target/abi/link stands in for it so the tests still run.
LINKDIR=$LIBDIR RPATHDIR=$LIBDIR
if [ ! -e "$LIBDIR/libnccl.so" ] && [ ! -e "$LIBDIR/libnccl.so.2" ]; then
  echo "run.sh: neither libnccl.so nor libnccl.so.2 in $LIBDIR (build with: cargo build -p ccl-ffi)"; exit 1
elif [ ! -e "$LIBDIR/libnccl.so.2" ]; then
  echo "run.sh: WARNING: $LIBDIR has no libnccl.so.2; using a private link to libnccl.so"
  mkdir -p "$OUT/link" && ln -sfn "$LIBDIR/libnccl.so" "$OUT/link/libnccl.so.2"
  RPATHDIR=$OUT/link
  result "library layout: libnccl.so.2 missing in $LIBDIR" 1
elif [ ! -e "$LIBDIR/libnccl.so" ]; then
  echo "run.sh: WARNING: $LIBDIR has no libnccl.so; linking through a private link"
  mkdir -p "$OUT/link" && ln -sfn "$LIBDIR/libnccl.so.2" "$OUT/link/libnccl.so"
  LINKDIR=$OUT/link
  result "library layout: libnccl.so missing in $LIBDIR" 1
fi
echo "run.sh: library $LIBDIR"
LINK=(-L "$LINKDIR" -Wl,-rpath,"$RPATHDIR" -lnccl)

# ----------------------------------------------------------------------------- 1. build
step "1. build (target/abi)"
build_rc=0
b() { echo "  $*"; "$@" || build_rc=1; }
for def in "" "-DCCL_CONFIG_V2_30"; do
  printf '#include "nccl.h"\nint main(void) { ncclConfig_t c = NCCL_CONFIG_INITIALIZER; ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER; (void)c; (void)s; return 0; }\n' > "$OUT/hdr.c"
  cp "$OUT/hdr.c" "$OUT/hdr.cc"
  b gcc -std=c99 -pedantic -Wall -Wextra -Werror $def -I ffi/include -c "$OUT/hdr.c" -o "$OUT/hdr_c.o"
  b g++ -std=c++11 -pedantic -Wall -Wextra -Werror $def -I ffi/include -c "$OUT/hdr.cc" -o "$OUT/hdr_cc.o"
done
printf '#include "ccl_ext.h"\nint main(void) { size_t n = 0; return (int)cclMonitorSnapshot(NULL, 0, &n); }\n' > "$OUT/ext_hdr.c"
cp "$OUT/ext_hdr.c" "$OUT/ext_hdr.cc"
b gcc -std=c99 -pedantic -Wall -Wextra -Werror -I ffi/include -c "$OUT/ext_hdr.c" -o "$OUT/ext_hdr_c.o"
b g++ -std=c++11 -pedantic -Wall -Wextra -Werror -I ffi/include -c "$OUT/ext_hdr.cc" -o "$OUT/ext_hdr_cc.o"
b gcc -std=c11 -O1 -Wall -Wextra -Werror -I ffi/include tests/abi/abi_check.c "${LINK[@]}" -o "$OUT/abi_check"
b gcc -std=gnu11 -O1 -Wall -Wextra -Werror -I ffi/include tests/abi/ext_check.c "${LINK[@]}" -o "$OUT/ext_check"
b gcc -std=c11 -O1 -Wall -Wextra -Werror -DCCL_CONFIG_V2_30 -I ffi/include tests/abi/abi_check.c "${LINK[@]}" -o "$OUT/abi_check_230"
b mpicc -std=gnu11 -O2 -Wall -Wextra -Werror -I ffi/include tests/abi/coll_check.c "${LINK[@]}" -lm -ldl -o "$OUT/coll_check"
result "build (headers C99/C++11, abi_check, abi_check_230, ext_check, coll_check)" $build_rc
if [ $build_rc -ne 0 ]; then
  printf '\n==== summary\n'; printf '  %s\n' "${SUMMARY[@]}"; exit 1
fi

# ----------------------------------------------------------------------------- 2. symbols
step "2. symbol check"
if [ "$MOCK" -eq 1 ]; then
  echo "  (skipped for the stand-in library: it exports only what the tests call)"
else
  tests/abi/check_symbols.sh "$LIBDIR"; result "check_symbols" $?
fi

# ----------------------------------------------------------------------------- 3. abi_check
step "3. abi_check"
NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} timeout 300 "$OUT/abi_check"; result "abi_check" $?
NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} timeout 300 "$OUT/abi_check_230"; result "abi_check_230 (96-byte ncclConfig_t)" $?
if [ "$MOCK" -eq 1 ]; then
  echo "  (ext_check skipped for the stand-in library: it has no ccl_ext.h functions)"
else
  NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} timeout 300 "$OUT/ext_check"; result "ext_check (ccl_ext.h)" $?
  # NCCL_DEBUG=WARN shows the text of an error a call returns, as NCCL does.
  NCCL_DEBUG=WARN NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} timeout 300 "$OUT/abi_check" \
    > /dev/null 2> "$OUT/abi_check.warn.txt"
  grep -q "uniqueId is NULL" "$OUT/abi_check.warn.txt"
  result "NCCL_DEBUG=WARN shows a failed call's error (ncclGetUniqueId(NULL))" $?
fi

# ----------------------------------------------------------------------------- mpirun options
# --allow-run-as-root   we are root in CI and on the device machine.
# --oversubscribe       4 ranks on 2 cores.
# --mca pml ob1 --mca btl self,vader
#                       MPI's own traffic (MPI_Bcast of the unique id, MPI_Allreduce of the
#                       results) goes through shared memory (vader: /dev/shm + CMA), which
#                       works between network namespaces, never over the test network and
#                       never through UCX/openib probing. (btl tcp would also work, but it
#                       would put MPI traffic on the links under test.)
# -x VAR                explicit forwarding of the variables the library and test read
#                       (local ranks inherit the environment anyway).
MPI_OPTS=(--allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,vader)
export COLL_CHECK_QUICK=${COLL_CHECK_QUICK:-$QUICK}
fwd_env() {
  local v
  for v in $(env | sed -n 's/^\(\(CCL\|NCCL\|COLL_CHECK\|RUST\)_[A-Za-z0-9_]*\)=.*/\1/p'); do printf -- '-x %s ' "$v"; done
}

# ----------------------------------------------------------------------------- 4. one host
if [ "$ONE_HOST" -eq 1 ]; then
  step "4. coll_check: $NP ranks, one host (shm between ranks), NCCL_SOCKET_IFNAME=lo"
  (
    export NCCL_SOCKET_IFNAME=lo
    # shellcheck disable=SC2046
    timeout "$COLL_TIMEOUT" mpirun "${MPI_OPTS[@]}" $(fwd_env) -np "$NP" "$OUT/coll_check"
  )
  result "coll_check, $NP ranks, one host" $?
fi

# ----------------------------------------------------------------------------- 5. netns
if [ "$NETNS" -eq 1 ]; then
  step "5. coll_check: $NP ranks in 2 network namespaces (2 per namespace: shm inside, the multipath transport across)"
  if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
    echo "  needs root, iproute2 and unshare: skipped"
    result "coll_check, network namespaces (skipped: not root / no ip)" 1
  else
    # One netns run at a time on this machine (the namespaces are machine-wide).
    exec 9>/tmp/ccl-netns.lock
    flock -w 600 9 || echo "run.sh: warning: could not lock /tmp/ccl-netns.lock"
    NNS=$(( (NP + 1) / 2 ))
    scripts/netns.sh up "$NNS" >/dev/null && echo "  scripts/netns.sh up $NNS: ok"
    # Why each piece is needed for OpenMPI when its ranks sit in different namespaces:
    # * mpirun runs inside cclhub (ip netns exec cclhub): the ranks reach their launcher's
    #   PMIx server over TCP. From the root namespace there is no route into the test
    #   namespaces, and by default the PMIx server listens on 127.0.0.1 only, which inside a
    #   namespace is that namespace's own loopback ("OPAL ERROR: Unreachable" in MPI_Init).
    # * PMIX_MCA_ptl_tcp_if_include=10.77.0.0/24 (an environment variable: it configures the
    #   PMIx server inside mpirun; "--mca ptl_tcp_if_include" does not reach it) makes the
    #   server listen on and advertise cclbr0's 10.77.0.254 in PMIX_SERVER_URI*, which every
    #   namespace reaches through the bridge.
    # * tests/abi/nswrap.sh puts rank r into cclns$((r/2)) with its own hostname and
    #   NCCL_HOSTID, so the library treats each namespace as a separate host.
    # * NCCL_SOCKET_IFNAME=cclv: the veth inside each namespace (cclv<i>, 10.77.0.<i+1>).
    # * oob_tcp_if_include is not needed: locally launched ranks talk to mpirun only via PMIx.
    (
      export NCCL_SOCKET_IFNAME=cclv
      export PMIX_MCA_ptl_tcp_if_include=10.77.0.0/24
      export CCL_RANKS_PER_NS=2
      # shellcheck disable=SC2046
      timeout "$COLL_TIMEOUT" ip netns exec cclhub mpirun "${MPI_OPTS[@]}" $(fwd_env) \
        -x CCL_RANKS_PER_NS -np "$NP" tests/abi/nswrap.sh "$OUT/coll_check"
    )
    result "coll_check, $NP ranks, 2 per network namespace" $?
    if [ "$KEEP_NETNS" -eq 0 ]; then scripts/netns.sh down >/dev/null && echo "  scripts/netns.sh down: ok"; fi
    flock -u 9
  fi
fi

printf '\n==== summary (library %s)\n' "$LIBDIR"
printf '  %s\n' "${SUMMARY[@]}"
exit $FAILED
