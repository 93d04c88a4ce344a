#!/bin/sh
# run_if_present.sh FILE... -- COMMAND [ARG...]: runs COMMAND when every FILE exists, else
# prints which one is missing and exits 77 (for a CMake script, which cannot choose its exit
# code before CMake 3.29).
for file; do
  shift
  [ "$file" = -- ] && exec "$@"
  [ -f "$file" ] || { echo "skipped: $file not found"; exit 77; }
done
echo "run_if_present.sh: no -- COMMAND" >&2
exit 2
