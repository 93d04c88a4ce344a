#!/bin/sh
# Checks that every plugin's dynamic symbol table defines kvc_plugin_entry and nothing else.
# Usage: check_plugin_exports.sh <nm> <plugin.so>...
set -eu
NM=$1
shift
status=0
for plugin; do
  # Defined dynamic symbols, without the version-node entries (type A).
  exported=$("$NM" -D --defined-only "$plugin" | awk '$2 != "A" { print $3 }' | sed 's/@.*//' | sort -u)
  if [ "$exported" != kvc_plugin_entry ]; then
    echo "FAIL: $(basename "$plugin") must export only kvc_plugin_entry; it exports:"
    echo "$exported" | sed 's/^/  /'
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "OK: $# plugins export only kvc_plugin_entry"
exit "$status"
