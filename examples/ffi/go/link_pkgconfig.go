package kvcache

// The library is found through pkg-config: the kvcache.pc of an install, or the one a build
// tree writes to <build>/lib/pkgconfig, named by PKG_CONFIG_PATH. Both carry an rpath to the
// library's folder, so programs built this way run without LD_LIBRARY_PATH.

// #cgo pkg-config: kvcache
import "C"
