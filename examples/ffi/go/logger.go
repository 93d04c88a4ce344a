package kvcache

// #include <stdint.h>
// #include <kvcache/kvcache.h>
//
// extern void goKvcLog(uintptr_t handle, kvc_log_level level, char *message);
//
// /* user_data carries the cgo.Handle of the Go function as an integer, not a Go pointer. */
// static void go_kvc_log(void *user_data, kvc_log_level level, const char *message) {
//   goKvcLog((uintptr_t)user_data, level, (char *)message);
// }
//
// static void go_kvc_set_logger(kvc_context *ctx, uintptr_t handle, kvc_log_level min_level) {
//   kvc_context_set_logger(ctx, go_kvc_log, (void *)handle, min_level);
// }
import "C"

import "runtime/cgo"

// LogLevel is the severity of a log message.
type LogLevel int32

// The log levels.
const (
	LogDebug LogLevel = C.KVC_LOG_DEBUG
	LogInfo  LogLevel = C.KVC_LOG_INFO
	LogWarn  LogLevel = C.KVC_LOG_WARN
	LogError LogLevel = C.KVC_LOG_ERROR
	LogOff   LogLevel = C.KVC_LOG_OFF
)

func (l LogLevel) String() string {
	switch l {
	case LogDebug:
		return "debug"
	case LogInfo:
		return "info"
	case LogWarn:
		return "warning"
	case LogError:
		return "error"
	}
	return "off"
}

// SetLogger routes the library's messages at or above min to fn; a nil fn restores the
// default (warnings and errors to stderr). fn runs on the library's threads, possibly
// concurrently, during calls on the context and its caches; it must not call SetLogger. A
// panic in fn does not reach the library (it cannot unwind through C frames): it is
// recovered and written to stderr.
func (ctx *Context) SetLogger(fn func(level LogLevel, message string), min LogLevel) error {
	ctx.mu.Lock()
	defer ctx.mu.Unlock()
	if ctx.c == nil {
		return ErrClosed
	}
	old := ctx.logger
	if fn == nil {
		C.kvc_context_set_logger(ctx.c, nil, nil, C.kvc_log_level(min))
		ctx.logger = 0
	} else {
		ctx.logger = cgo.NewHandle(fn)
		C.go_kvc_set_logger(ctx.c, C.uintptr_t(ctx.logger), C.kvc_log_level(min))
	}
	// The library calls the logger under its own lock, so once the new one is set no call
	// can still be using the old handle.
	if old != 0 {
		old.Delete()
	}
	return nil
}
