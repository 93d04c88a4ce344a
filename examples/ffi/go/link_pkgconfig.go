//go:build !kvcache_nopkgconfig

package kvcache

// Without the kvcache_nopkgconfig build tag the library is found through pkg-config. With the
// tag (a build tree, where no kvcache.pc is installed) CGO_CFLAGS and CGO_LDFLAGS must name
// the include and library folders instead.

// #cgo pkg-config: kvcache
import "C"
