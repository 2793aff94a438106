#!/usr/bin/env bash
# tests/abi/check_symbols.sh [LIBDIR] -- the symbol check of libnccl.so.2.
#
#   1. ffi/include/nccl.h declares exactly the functions listed in ffi/include/symbols.txt
#      (each through NCCL_API_DECL, which also declares the pnccl twin);
#   2. when LIBDIR/libnccl.so.2 exists: its SONAME is libnccl.so.2, every name in symbols.txt
#      is exported as a defined function both as nccl<Name> and pnccl<Name>, and nothing
#      else is exported (NCCL_ABI.md: only nccl* and pnccl*, no symbol versioning) but
#      libccl's own functions: those ffi/include/ccl_ext.h declares, listed in
#      ffi/include/ccl_ext_symbols.txt, exported once each (no pnccl twin).
# Prints "check_symbols: N passed, M failed"; exit 1 on any failure.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LIBDIR=${1:-$ROOT/target/debug}
HDR=$ROOT/ffi/include/nccl.h
SYMS=$ROOT/ffi/include/symbols.txt
EXT_HDR=$ROOT/ffi/include/ccl_ext.h
EXT_SYMS=$ROOT/ffi/include/ccl_ext_symbols.txt
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL check_symbols: $*"; }

# 1. header <-> symbols.txt
hdr_names=$(grep -o 'NCCL_API_DECL([^,]*, *[A-Za-z0-9_]*' "$HDR" | sed 's/.*, *//' | grep -v '^name$' | sort)
txt_names=$(grep -v '^\s*$' "$SYMS" | sort)
if [ "$hdr_names" = "$txt_names" ]; then ok; else
  bad "nccl.h and symbols.txt differ:"; diff <(echo "$hdr_names") <(echo "$txt_names") | sed 's/^/    /'
fi
ext_hdr_names=$(grep -oE '^ncclResult_t +ccl[A-Za-z0-9_]+\(' "$EXT_HDR" | sed -E 's/.* (ccl[A-Za-z0-9_]+)\(/\1/' | sort)
ext_names=$(grep -v '^\s*$' "$EXT_SYMS" | sort)
if [ -n "$ext_names" ] && [ "$ext_hdr_names" = "$ext_names" ]; then ok; else
  bad "ccl_ext.h and ccl_ext_symbols.txt differ:"; diff <(echo "$ext_hdr_names") <(echo "$ext_names") | sed 's/^/    /'
fi
dups=$(echo "$txt_names" | uniq -d)
if [ -z "$dups" ]; then ok; else bad "duplicate names in symbols.txt: $dups"; fi

# 2. the library
LIB=$LIBDIR/libnccl.so.2
if [ ! -e "$LIB" ] && [ -e "$LIBDIR/libnccl.so" ]; then
  bad "$LIB missing (only libnccl.so): programs linked with -lnccl need libnccl.so.2 at run time"
  LIB=$LIBDIR/libnccl.so
fi
if [ ! -e "$LIB" ]; then
  echo "check_symbols: $LIB not found: library checks skipped"
else
  echo "check_symbols: checking $LIB"
  soname=$(readelf -d "$LIB" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
  if [ "$soname" = "libnccl.so.2" ]; then ok; else bad "SONAME is '$soname', want libnccl.so.2"; fi
  # defined dynamic symbols: name and type
  exports=$(nm -D --defined-only "$LIB" | awk '{print $NF" "$(NF-1)}')
  exported_names=$(echo "$exports" | awk '{print $1}' | sed 's/@.*//' | sort -u)
  missing=() notfunc=()
  while read -r base; do
    [ -z "$base" ] && continue
    for name in "$base" "p$base"; do
      line=$(echo "$exports" | awk -v n="$name" '$1 == n || $1 ~ "^"n"@"')
      if [ -z "$line" ]; then missing+=("$name")
      elif ! echo "$line" | awk '{print $2}' | grep -qE '^[TtiW]$'; then notfunc+=("$name")
      else ok; fi
    done
  done < "$SYMS"
  [ ${#missing[@]} -eq 0 ] || bad "${#missing[@]} symbols not exported: ${missing[*]}"
  [ ${#notfunc[@]} -eq 0 ] || bad "exported but not functions: ${notfunc[*]}"
  for name in $ext_names; do
    line=$(echo "$exports" | awk -v n="$name" '$1 == n')
    if [ -z "$line" ]; then bad "$name (ccl_ext.h) not exported"
    elif ! echo "$line" | awk '{print $2}' | grep -qE '^[TtiW]$'; then bad "$name exported but not a function"
    else ok; fi
  done
  extra=$(comm -23 <(echo "$exported_names" | grep -vE '^p?nccl' | sort -u) <(echo "$ext_names") || true)
  if [ -z "$extra" ]; then ok; else bad "exports other than nccl*/pnccl* and ccl_ext.h's: $(echo $extra | head -c 600)"; fi
  versioned=$(nm -D --defined-only "$LIB" | grep -c '@' || true)
  if [ "$versioned" = "0" ]; then ok; else bad "$versioned exported symbols carry a symbol version"; fi
  unlisted=$(comm -23 <(echo "$exported_names" | grep -E '^p?nccl' | sed 's/^pnccl/nccl/' | sort -u) <(echo "$txt_names"))
  [ -z "$unlisted" ] || echo "check_symbols: note: exported but not in symbols.txt: $(echo $unlisted)"
fi

echo "check_symbols: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
