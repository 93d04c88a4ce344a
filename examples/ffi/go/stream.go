package kvcache

import (
	"bytes"
	"context"
	"io"
)

// streamChunk is how many bytes ExportTo writes, and ImportFrom reads, between two checks of
// their context.
const streamChunk = 1 << 20

// ExportTo writes Export's bytes for the sequence to w, in chunks with ctx checked before
// each, and returns the bytes written. The image is taken whole first (the sequence may
// change once the lock is released), so memory for one copy of it is needed. It stops at
// the first error: ctx.Err(), Export's *Error or w's.
func (cache *Cache) ExportTo(ctx context.Context, id int32, w io.Writer) (int64, error) {
	data, err := cache.ExportCtx(ctx, id)
	if err != nil {
		return 0, err
	}
	var written int64
	for len(data) > 0 {
		if err := ctx.Err(); err != nil {
			return written, err
		}
		chunk := data
		if len(chunk) > streamChunk {
			chunk = chunk[:streamChunk]
		}
		n, err := w.Write(chunk)
		written += int64(n)
		if err != nil {
			return written, err
		}
		data = data[n:]
	}
	return written, nil
}

// ImportFrom creates sequence id from ExportTo's bytes read from r up to its end, in chunks
// with ctx checked before each; on any error (ctx.Err(), r's, or Import's *Error) no
// sequence is created. It takes the cache exclusively for the import only, not while
// reading.
func (cache *Cache) ImportFrom(ctx context.Context, id int32, r io.Reader) error {
	var buf bytes.Buffer
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A LimitReader ends at the chunk's end or at r's: fewer bytes than a chunk is r's.
		n, err := buf.ReadFrom(io.LimitReader(r, streamChunk))
		if err != nil {
			return err
		}
		if n < streamChunk {
			return cache.ImportCtx(ctx, id, buf.Bytes())
		}
	}
}
