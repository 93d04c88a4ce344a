package kvcache

// #include <stdlib.h>
// #include <kvcache/kvcache.h>
import "C"

import (
	"context"
	"unsafe"
)

// exportAttempts bounds Export's attempts on a sequence other goroutines keep changing.
const exportAttempts = 64

// ExportSize is the size in bytes of Export's output for the sequence as it is now.
func (cache *Cache) ExportSize(id int32) (int, error) {
	var n C.size_t
	err := cache.shared(func() error {
		return statusError("kvc_seq_export_size", C.kvc_seq_export_size(cache.c, C.int32_t(id), &n))
	})
	return int(n), err
}

// Export returns everything stored for the sequence in the versioned, checksummed format
// of docs/sequence_format.md, which Import reads back in this or another cache or process.
func (cache *Cache) Export(id int32) ([]byte, error) {
	return cache.ExportCtx(context.Background(), id)
}

// ExportCtx is Export unless ctx is done before an export attempt starts (ctx.Err() is then
// returned); an attempt that has started runs to its end.
func (cache *Cache) ExportCtx(ctx context.Context, id int32) ([]byte, error) {
	var data []byte
	err := cache.sharedCtx(ctx, func() error {
		var size C.size_t
		if err := statusError("kvc_seq_export_size", C.kvc_seq_export_size(cache.c, C.int32_t(id), &size)); err != nil {
			return err
		}
		attempts := 0
		for {
			data = make([]byte, size)
			var written C.size_t
			st := C.kvc_seq_export(cache.c, C.int32_t(id), bytesPointer(data), size, &written)
			if st == nil {
				data = data[:written]
				return nil
			}
			// A concurrent call on the sequence may have grown it past the buffer (and others
			// may have changed it again since): try again with its size now, a bounded number
			// of times.
			err := statusError("kvc_seq_export", st)
			attempts++
			var now C.size_t
			if statusError("kvc_seq_export_size", C.kvc_seq_export_size(cache.c, C.int32_t(id), &now)) != nil || attempts == exportAttempts {
				return err
			}
			size = now
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return data, nil
}

// Import creates sequence id from Export's bytes; on any error no sequence is created. It
// takes the cache exclusively.
func (cache *Cache) Import(id int32, data []byte) error {
	return cache.ImportCtx(context.Background(), id, data)
}

// ImportCtx is Import unless ctx is done before the import starts (ctx.Err() is then
// returned and no sequence is created); an import that has started runs to its end.
func (cache *Cache) ImportCtx(ctx context.Context, id int32, data []byte) error {
	return cache.exclusiveCtx(ctx, func() error {
		return statusError("kvc_seq_import",
			C.kvc_seq_import(cache.c, C.int32_t(id), bytesPointer(data), C.size_t(len(data))))
	})
}

// ExportFile writes Export's bytes to the file at path, replaced atomically: a failed write
// (ErrIO) leaves an earlier file as it was.
func (cache *Cache) ExportFile(id int32, path string) error {
	return cache.ExportFileCtx(context.Background(), id, path)
}

// ExportFileCtx is ExportFile unless ctx is done before the write starts (ctx.Err() is then
// returned); a write that has started runs to its end.
func (cache *Cache) ExportFileCtx(ctx context.Context, id int32, path string) error {
	var m cmem
	defer m.free()
	return cache.sharedCtx(ctx, func() error {
		return statusError("kvc_seq_export_file", C.kvc_seq_export_file(cache.c, C.int32_t(id), m.str(path)))
	})
}

// ImportFile is Import from the file at path (ErrNotFound when it does not exist). It takes
// the cache exclusively.
func (cache *Cache) ImportFile(id int32, path string) error {
	return cache.ImportFileCtx(context.Background(), id, path)
}

// ImportFileCtx is ImportFile unless ctx is done before the read starts (ctx.Err() is then
// returned); a read that has started runs to its end.
func (cache *Cache) ImportFileCtx(ctx context.Context, id int32, path string) error {
	var m cmem
	defer m.free()
	return cache.exclusiveCtx(ctx, func() error {
		return statusError("kvc_seq_import_file", C.kvc_seq_import_file(cache.c, C.int32_t(id), m.str(path)))
	})
}

// bytesPointer is the address of b's first byte, or nil for an empty slice.
func bytesPointer(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}
