package kvcache

// A file with //export may only declare in its preamble, so the C side of the logger is in
// logger.go.

// #include <stdint.h>
// #include <kvcache/kvcache.h>
import "C"

import (
	"fmt"
	"os"
	"runtime/cgo"
)

//export goKvcLog
func goKvcLog(handle C.uintptr_t, level C.kvc_log_level, message *C.char) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "kvcache: the logger panicked: %v\n", r)
		}
	}()
	fn := cgo.Handle(handle).Value().(func(LogLevel, string))
	fn(LogLevel(level), C.GoString(message))
}
