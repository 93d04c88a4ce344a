#!/bin/sh
# Checks the dynamic symbol table of libkvcache: every exported symbol is a kvc_ function
# declared in the public header, every such function is exported, and nothing from the core,
# the policies or the backends leaks (no C++ symbols, no kernel names); and (the ABI lock) the
# exports with their version nodes equal the committed list tests/abi/symbols.txt, so that a
# symbol added, removed or moved to another version fails. To change the exports on purpose,
# update the header and the version script, rebuild, and commit the new list with
#   nm -D --defined-only build/<preset>/lib/libkvcache.so | awk '$2 != "A" { print $3 }' \
#     | sort -u > tests/abi/symbols.txt
# Usage: check_exports.sh <nm> <libkvcache.so> <kvcache.h> <symbols.txt>
set -eu
NM=$1
LIB=$2
HEADER=$3
LOCKED=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Defined dynamic symbols, without the version-node entries (type A).
"$NM" -D --defined-only "$LIB" | awk '$2 != "A" { print $3 }' | sort -u > "$tmp/versioned"
sed 's/@.*//' "$tmp/versioned" | sort -u > "$tmp/exported"
# Functions declared with KVC_API in the header.
grep -E '^KVC_API' "$HEADER" | sed -E 's/^[^(]*[^A-Za-z0-9_](kvc_[A-Za-z0-9_]+)[[:space:]]*\(.*/\1/' | sort -u > "$tmp/declared"

status=0
count=$(wc -l < "$tmp/exported")
echo "libkvcache exports $count symbols; the header declares $(wc -l < "$tmp/declared") functions"
if [ "$count" -eq 0 ]; then
  echo "FAIL: no exported symbols found in $LIB"
  status=1
fi
if grep -v '^kvc_' "$tmp/exported" > "$tmp/bad_prefix"; then
  echo "FAIL: exported symbols without the kvc_ prefix:"
  sed 's/^/  /' "$tmp/bad_prefix"
  status=1
fi
if grep -E '^_Z|backend_cpu|attention_kernel|attend_block|_kernel|^tbb|^YAML|^boost' "$tmp/exported" > "$tmp/leaks"; then
  echo "FAIL: internal (core, policy or backend) symbols are exported:"
  sed 's/^/  /' "$tmp/leaks"
  status=1
fi
for required in kvc_cache_create kvc_context_create kvc_append kvc_attend kvc_status_free kvc_version; do
  if ! grep -qx "$required" "$tmp/exported"; then
    echo "FAIL: $required is not exported"
    status=1
  fi
done
if comm -23 "$tmp/exported" "$tmp/declared" | grep . > "$tmp/extra"; then
  echo "FAIL: exported but not declared in $(basename "$HEADER"):"
  sed 's/^/  /' "$tmp/extra"
  status=1
fi
if comm -13 "$tmp/exported" "$tmp/declared" | grep . > "$tmp/missing"; then
  echo "FAIL: declared in $(basename "$HEADER") but not exported:"
  sed 's/^/  /' "$tmp/missing"
  status=1
fi
if ! diff -u "$LOCKED" "$tmp/versioned" > "$tmp/lock"; then
  echo "FAIL: the exports differ from $LOCKED (- committed, + now):"
  sed 's/^/  /' "$tmp/lock"
  status=1
fi
[ "$status" -eq 0 ] && echo "OK"
exit "$status"
