#!/bin/sh
# ABI lock, layouts: the struct sizes, field offsets and enumerator values of kvcache.h and
# kvcache_plugin.h (printed by kvc-abi-layout) must equal the committed list for x86-64.
# To change the ABI on purpose (a new versioned field at the end of a struct, a new
# enumerator), add its line to tests/abi/layout.c, rebuild, and commit the new list with
#   build/<preset>/tests/kvc-abi-layout > tests/abi/layout_x86_64.txt
# after checking with `git diff` that only the intended lines changed.
# Usage: check_layout.sh <kvc-abi-layout> <layout_x86_64.txt>
set -eu
if "$1" | diff -u "$2" -; then
  echo "OK: $(wc -l < "$2") layout lines match $(basename "$2")"
else
  echo "FAIL: the public headers' ABI changed (lines marked - are the committed ones, + now)"
  exit 1
fi
