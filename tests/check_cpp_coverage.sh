#!/bin/sh
# kvcache.hpp covers every C call: each function kvcache.h declares with KVC_API is called in
# kvcache.hpp (a kvc_X_init_sized function through its kvc_X_init macro).
# Usage: check_cpp_coverage.sh <kvcache.h> <kvcache.hpp>
set -eu
status=0
for fn in $(grep -E '^KVC_API' "$1" | sed -E 's/^[^(]*[^A-Za-z0-9_](kvc_[A-Za-z0-9_]+)[[:space:]]*\(.*/\1/' | sort -u); do
  called=${fn%_sized}
  if ! grep -Eq "(^|[^A-Za-z0-9_])$called[[:space:]]*\(" "$2"; then
    echo "FAIL: kvcache.hpp does not call $called"
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "OK: kvcache.hpp calls every function of $(basename "$1")"
exit "$status"
