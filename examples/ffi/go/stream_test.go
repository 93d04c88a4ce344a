package kvcache_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"reflect"
	"testing"
	"testing/iotest"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

// bigCache holds one sequence whose export image is over 2 MiB: more than one of the 1 MiB
// chunks ExportTo writes and ImportFrom reads between checks of their context.
const bigCache = `
cache: { layers: 1, kv_heads: 8, q_heads: 8, head_dim: 64, dtype: f32, memory_limit: 16MiB }
`

func bigSequence(t *testing.T) (*kvcache.Cache, []byte) {
	t.Helper()
	_, cache := open(t, "", bigCache)
	must(t, cache.CreateSeq(0))
	var b kvcache.Batch
	b.AddRun(0, 0, 600)
	rows := random(rand.New(rand.NewSource(7)), b.Tokens()*8*64)
	must(t, cache.Append(0, b, kvcache.F32Tensor(rows), kvcache.F32Tensor(rows)))
	data, err := cache.Export(0)
	must(t, err)
	if len(data) <= 2<<20 {
		t.Fatalf("the export image is %d bytes; the test needs more than 2 MiB", len(data))
	}
	return cache, data
}

// bytesSink is an io.Writer counting its Write calls, calling onWrite (if set) first.
type bytesSink struct {
	bytes.Buffer
	writes  int
	onWrite func()
}

func (w *bytesSink) Write(p []byte) (int, error) {
	w.writes++
	if w.onWrite != nil {
		w.onWrite()
	}
	return w.Buffer.Write(p)
}

// endless is an io.Reader of zeros that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 0
	}
	return len(p), nil
}

func TestExportToAndImportFromStreamTheExportImage(t *testing.T) {
	cache, data := bigSequence(t)
	var w bytesSink
	n, err := cache.ExportTo(context.Background(), 0, &w)
	must(t, err)
	if n != int64(len(data)) || !bytes.Equal(w.Bytes(), data) || w.writes < 3 {
		t.Fatalf("ExportTo wrote %d bytes in %d writes; want Export's %d bytes in 1 MiB chunks", n, w.writes, len(data))
	}
	// A reader that returns a byte at a time still delivers the whole image.
	must(t, cache.ImportFrom(context.Background(), 1, iotest.OneByteReader(bytes.NewReader(data))))
	want, err := cache.View(0, 0, 0)
	must(t, err)
	got, err := cache.View(1, 0, 0)
	must(t, err)
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the sequence imported through ImportFrom differs from the exported one")
	}
	// A truncated stream is the library's error; no sequence is created.
	err = cache.ImportFrom(context.Background(), 2, bytes.NewReader(data[:len(data)/2]))
	mustFail(t, err, kvcache.ErrInvalidArgument, "")
	must(t, cache.CreateSeq(2))
}

func TestStreamsStopAtTheirContextBetweenChunks(t *testing.T) {
	cache, data := bigSequence(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := bytesSink{onWrite: cancel}
	n, err := cache.ExportTo(ctx, 0, &w)
	if !errors.Is(err, context.Canceled) || w.writes != 1 || n != 1<<20 {
		t.Fatalf("ExportTo cancelled in its first write: %d bytes in %d writes, %v; want one 1 MiB chunk, context.Canceled",
			n, w.writes, err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	r := cancelOnRead{r: bytes.NewReader(data), cancel: cancel}
	if err := cache.ImportFrom(ctx, 1, &r); !errors.Is(err, context.Canceled) {
		t.Fatalf("ImportFrom cancelled while reading: %v; want context.Canceled", err)
	}
	must(t, cache.CreateSeq(1)) // the cancelled import created nothing
}

func TestStreamErrorsAreReturnedAsTheyCame(t *testing.T) {
	cache, _ := bigSequence(t)
	broken := errors.New("disk on fire")
	if _, err := cache.ExportTo(context.Background(), 0, failingWriter{broken}); err != broken {
		t.Fatalf("ExportTo into a failing writer: %v; want its error", err)
	}
	if err := cache.ImportFrom(context.Background(), 1, iotest.ErrReader(broken)); err != broken {
		t.Fatalf("ImportFrom from a failing reader: %v; want its error", err)
	}
	var w bytes.Buffer
	_, err := cache.ExportTo(context.Background(), 7, &w)
	mustFail(t, err, kvcache.ErrNotFound, "7")
}

type cancelOnRead struct {
	r      io.Reader
	cancel func()
}

func (c *cancelOnRead) Read(p []byte) (int, error) {
	c.cancel()
	return c.r.Read(p)
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }
