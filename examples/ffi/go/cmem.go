package kvcache

// #include <stdlib.h>
import "C"

import "unsafe"

// cmem collects C allocations made for one call (strings, arrays of structs holding
// pointers), which cgo's rules forbid building in Go memory; free releases them all.
type cmem []unsafe.Pointer

func (m *cmem) alloc(size int) unsafe.Pointer {
	p := C.calloc(1, C.size_t(size))
	if p == nil {
		panic("kvcache: C.calloc failed")
	}
	*m = append(*m, p)
	return p
}

func (m *cmem) str(s string) *C.char {
	p := C.CString(s)
	*m = append(*m, unsafe.Pointer(p))
	return p
}

// optional is s as a C string, or NULL for "" (the C API's "not given").
func (m *cmem) optional(s string) *C.char {
	if s == "" {
		return nil
	}
	return m.str(s)
}

func (m *cmem) free() {
	for _, p := range *m {
		C.free(p)
	}
	*m = nil
}
