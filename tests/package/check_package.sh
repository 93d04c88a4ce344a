#!/usr/bin/env bash
# check_package.sh <build-dir>: installs a configured and built kvcache build into a temporary
# prefix, then checks that the installed package works for a consumer:
#   1. CMake: find_package(kvcache) + kvcache::kvcache (tests/package/CMakeLists.txt), run it,
#      with a backend plugin built on the installed skeleton header;
#   2. pkg-config: libdir, includedir and plugindir are folders; cc main.c
#      $(pkg-config --cflags --libs kvcache), run it.
# The consumers must find the built-in plugins in the installed plugin folder, not the build
# tree, so KVC_PLUGIN_PATH is cleared. Set KEEP_PREFIX=1 to keep the temporary folder.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 <build-dir>" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cmake=${CMAKE:-cmake}

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "check_package: $build is not a CMake build folder" >&2
  exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-package.XXXXXX")
cleanup() {
  if [[ "${KEEP_PREFIX:-0}" == 1 ]]; then
    echo "check_package: kept $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
prefix=$tmp/prefix

# Build the consumers with the compiler and flags of the build under test (a sanitizer build
# needs its runtime in the executable too).
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -n 1; }
cc=$(cache_value CMAKE_C_COMPILER)
cc=${cc:-cc}
cflags=$(cache_value CMAKE_C_FLAGS)

unset KVC_PLUGIN_PATH

echo "== install $build into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" ||
  { cat "$tmp/install.log" >&2; exit 1; }

lib=$(find "$prefix" -name libkvcache.so -not -path '*/plugins/*' -print -quit)
[[ -n "$lib" ]] || { echo "check_package: libkvcache.so was not installed" >&2; exit 1; }
libdir=$(dirname "$lib")
for f in include/kvcache/kvcache.h include/kvcache/kvcache_plugin.h \
         include/kvcache/kvcache_backend_plugin.hpp include/kvcache/kvcache_plugin_support.hpp \
         include/kvcache/kvcache_error.hpp \
         include/kvcache/kvcache_export.h include/kvcache/kvcache_version.h; do
  [[ -f "$prefix/$f" ]] || { echo "check_package: $f was not installed" >&2; exit 1; }
done
for f in kvcacheConfig.cmake kvcacheConfigVersion.cmake kvcacheTargets.cmake; do
  [[ -f "$libdir/cmake/kvcache/$f" ]] ||
    { echo "check_package: $libdir/cmake/kvcache/$f was not installed" >&2; exit 1; }
done
[[ -f "$libdir/pkgconfig/kvcache.pc" ]] ||
  { echo "check_package: kvcache.pc was not installed" >&2; exit 1; }
soname=$(objdump -p "$libdir/libkvcache.so" 2>/dev/null | awk '$1 == "SONAME" { print $2 }' || true)
echo "   libdir $libdir, SONAME ${soname:-?}"
if ! compgen -G "$libdir/kvcache/plugins/*.so" >/dev/null; then
  echo "check_package: no plugin installed in $libdir/kvcache/plugins" >&2
  exit 1
fi

echo "== CMake consumer: find_package(kvcache)"
"$cmake" -S "$here" -B "$tmp/consumer" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$cflags" >"$tmp/consumer.log" ||
  { cat "$tmp/consumer.log" >&2; exit 1; }
grep -- '-- kvcache ' "$tmp/consumer.log" || true
"$cmake" --build "$tmp/consumer" >>"$tmp/consumer.log" ||
  { cat "$tmp/consumer.log" >&2; exit 1; }
"$tmp/consumer/consumer" "$tmp/consumer/libpackage_host_backend.so"

echo "== pkg-config consumer: cc \$(pkg-config --cflags --libs kvcache)"
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
echo "   kvcache $(pkg-config --modversion kvcache): $(pkg-config --cflags --libs kvcache)"
for var in libdir includedir plugindir; do
  dir=$(pkg-config --variable=$var kvcache)
  [[ -d "$dir" ]] || { echo "check_package: kvcache.pc: $var $dir is not a folder" >&2; exit 1; }
done
# shellcheck disable=SC2046,SC2086  # word splitting of the flags is intended
"$cc" -std=c99 -Wall -Wextra -pedantic -Werror $cflags "$here/main.c" -o "$tmp/consumer-pc" \
  $(pkg-config --cflags --libs kvcache)
LD_LIBRARY_PATH="$(pkg-config --variable=libdir kvcache)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$tmp/consumer-pc"

echo "check_package: OK"
