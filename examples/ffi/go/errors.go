package kvcache

// #include <kvcache/kvcache.h>
import "C"

import "errors"

// Code is a kvc_status_code. Every code but OK is also an error value, so that
// errors.Is(err, kvcache.ErrOutOfMemory) tells what an *Error was about, as
// errors.Is(err, syscall.ENOENT) does for an Errno.
type Code int32

// The status codes of kvcache.h; their values are stable across versions.
const (
	OK                 Code = C.KVC_OK
	ErrInvalidArgument Code = C.KVC_ERR_INVALID_ARGUMENT
	ErrOutOfMemory     Code = C.KVC_ERR_OUT_OF_MEMORY
	ErrNotFound        Code = C.KVC_ERR_NOT_FOUND
	ErrAlreadyExists   Code = C.KVC_ERR_ALREADY_EXISTS
	ErrConfig          Code = C.KVC_ERR_CONFIG
	ErrPlugin          Code = C.KVC_ERR_PLUGIN
	ErrUnsupported     Code = C.KVC_ERR_UNSUPPORTED
	ErrNoDevice        Code = C.KVC_ERR_NO_DEVICE
	ErrInternal        Code = C.KVC_ERR_INTERNAL
	ErrIO              Code = C.KVC_ERR_IO
)

// Name is the library's stable name for the code, such as "OUT_OF_MEMORY".
func (c Code) Name() string {
	return C.GoString(C.kvc_status_code_name(C.kvc_status_code(c)))
}

func (c Code) Error() string { return "kvcache: " + c.Name() }

// ErrClosed is returned by calls on a Context or Cache after its Close.
var ErrClosed = errors.New("kvcache: use of a closed handle")

// Error is a failed call: the C function, the status code and the library's message.
type Error struct {
	Op      string // the C function, such as "kvc_append"
	Code    Code
	Message string
}

func (e *Error) Error() string {
	return "kvcache: " + e.Op + ": " + e.Code.Name() + ": " + e.Message
}

// Unwrap returns the Code, which is what makes errors.Is match the sentinels above.
func (e *Error) Unwrap() error { return e.Code }

// statusError turns a status returned by the C function op into an *Error and frees it; a
// NULL status (success) gives nil.
func statusError(op string, st *C.kvc_status) error {
	if st == nil {
		return nil
	}
	defer C.kvc_status_free(st)
	return &Error{
		Op:      op,
		Code:    Code(C.kvc_status_get_code(st)),
		Message: C.GoString(C.kvc_status_message(st)),
	}
}

// invalid is an INVALID_ARGUMENT found on the Go side, before calling op: a slice that
// does not match the shape it is passed with, which C could not check.
func invalid(op, message string) error {
	return &Error{Op: op, Code: ErrInvalidArgument, Message: message}
}
