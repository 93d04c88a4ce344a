// Package kvcache is a cgo binding of the kvcache C API (capi/include/kvcache/kvcache.h):
// a budgeted key/value cache for transformer inference.
//
// # Handles and ownership
//
// A Context (plugins, configuration, thread arena) makes Caches; each has a Close method
// that frees the C object and that is safe to call twice. Close every Cache before its
// Context: Context.Close refuses while a Cache made from it is open. A finalizer closes a
// handle that became unreachable unclosed and logs the leak; it is a safety net, not a way
// to manage memory, because the GC does not see the C memory a cache holds.
//
// Errors are *Error values carrying the C function, the status code and the library's
// message. Each Code but OK is also an error, so errors.Is(err, ErrOutOfMemory) tests the
// code. A failed call leaves the cache as it was. Calls on a closed handle return ErrClosed.
//
// No Go pointer is kept by C: tensors, batches and byte buffers are read or written during
// the call only. No C pointer is kept either: strings, policy names and the views of
// Cache.View are copied into Go memory before the call returns.
//
// # Concurrency
//
// A Context is safe for concurrent use, and so is a Cache: calls on sequences (Append,
// Attend, Compress, Truncate, Export, ...) share a sync.RWMutex, and the library serialises
// those that name the same sequence. Calls that change the set of sequences (CreateSeq,
// RemoveSeq, Fork, Import, ImportFile, ImportFrom, Offload, Restore, LoadPrefix,
// AttachPrefix), View (it copies the storage that a concurrent call could change) and Close
// take it exclusively, so they wait for calls in progress instead of racing them. The library
// keeps no thread-local state, so it does not matter that a goroutine may move between OS
// threads from one call to the next.
//
// # Contexts
//
// The calls that may take long, Compress, the exports and imports, and the store calls
// (Offload, Restore, SavePrefix, LoadPrefix, and PublishPrefix and AttachPrefix, which may
// write to or read from the cache's PrefixStore), have ...Ctx variants taking a
// context.Context, and ExportTo and ImportFrom stream the export image to an io.Writer and
// from an io.Reader. They return ctx.Err() when the context is done before the C call starts,
// checked again once the cache's lock is held, and, for the streams, between 1 MiB chunks. A C
// call in progress is not interrupted: it runs to its end.
//
// # Installing and building
//
// The module is github.com/kvcache/kvcache/examples/ffi/go (the package is named kvcache). The
// library is found through pkg-config: the kvcache.pc of an installed kvcache, or the one a
// build tree writes, with PKG_CONFIG_PATH=<build>/lib/pkgconfig. Both carry an rpath to the
// library, so no LD_LIBRARY_PATH is needed to run.
package kvcache
