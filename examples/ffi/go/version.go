package kvcache

// #include <kvcache/kvcache.h>
import "C"

// Version is the runtime library's version as MAJOR*10000 + MINOR*100 + PATCH.
func Version() uint32 { return uint32(C.kvc_version()) }

// VersionString is the runtime library's version as "MAJOR.MINOR.PATCH".
func VersionString() string { return C.GoString(C.kvc_version_string()) }

// HeaderVersion is the version of the kvcache.h this package was compiled against.
const HeaderVersion = uint32(C.KVC_VERSION_NUMBER)
