package kvcache_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

// Every call taking a context.Context returns its error, changing nothing, when it is done
// before the call starts.
func TestCallsWithADoneContextReturnItsErrorAndChangeNothing(t *testing.T) {
	ctx := storesContext(t)
	cache := storesCache(t, ctx)
	fillStored(t, cache, 0)
	data, err := cache.Export(0)
	must(t, err)
	must(t, cache.Offload(0, "mem", "kept"))
	fillStored(t, cache, 0)
	path := filepath.Join(t.TempDir(), "seq.kvcseq")
	prefix := kvcache.Prefix{Model: "m", TokenIDs: make([]int32, prefilled), ChunkTokens: 4}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, stop := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer stop()
	for _, done := range []context.Context{cancelled, expired} {
		want := done.Err()
		calls := map[string]error{
			"CompressCtx":   cache.CompressCtx(done, kvcache.AllLayers, 0),
			"ImportCtx":     cache.ImportCtx(done, 1, data),
			"ExportFileCtx": cache.ExportFileCtx(done, 0, path),
			"ImportFileCtx": cache.ImportFileCtx(done, 1, path),
			"OffloadCtx":    cache.OffloadCtx(done, 0, "mem", "new"),
			"RestoreCtx":    cache.RestoreCtx(done, 1, "mem", "kept"),
		}
		_, calls["ExportCtx"] = cache.ExportCtx(done, 0)
		_, calls["SavePrefixCtx"] = cache.SavePrefixCtx(done, 0, "mem", prefix)
		_, calls["LoadPrefixCtx"] = cache.LoadPrefixCtx(done, 1, "mem", prefix)
		_, calls["PublishPrefixCtx"] = cache.PublishPrefixCtx(done, 0, prefix)
		_, calls["AttachPrefixCtx"] = cache.AttachPrefixCtx(done, 1, prefix)
		_, calls["ExportTo"] = cache.ExportTo(done, 0, &bytesSink{})
		calls["ImportFrom"] = cache.ImportFrom(done, 1, &endless{})
		for name, err := range calls {
			if !errors.Is(err, want) {
				t.Errorf("%s with a done context (%v): got %v", name, want, err)
			}
		}
	}
	// Nothing was created, written, offloaded or saved.
	stats, err := cache.Stats()
	must(t, err)
	if stats.Sequences != 1 {
		t.Fatalf("%d sequences; want sequence 0 only", stats.Sequences)
	}
	mustFail(t, cache.ImportFile(1, path), kvcache.ErrNotFound, "seq.kvcseq")
	mustFail(t, ctx.StoreDrop("mem", "new"), kvcache.ErrNotFound, "new")
	if n, err := cache.LoadPrefix(1, "mem", prefix); err != nil || n != 0 {
		t.Fatalf("LoadPrefix after a cancelled SavePrefixCtx: %d tokens, %v; want 0 tokens", n, err)
	}
}

// With a context that is not done the calls do their work.
func TestCallsWithALiveContextWork(t *testing.T) {
	ctx := storesContext(t)
	cache := storesCache(t, ctx)
	fillStored(t, cache, 0)
	live, cancel := context.WithCancel(context.Background())
	defer cancel()
	want := attendBoth(t, cache, 0)
	must(t, cache.CompressCtx(live, kvcache.AllLayers, 0))
	must(t, cache.OffloadCtx(live, 0, "files", "seq"))
	must(t, cache.RestoreCtx(live, 1, "files", "seq"))
	if got := attendBoth(t, cache, 1); !reflect.DeepEqual(got, want) {
		t.Fatal("the sequence restored with a live context attends differently")
	}
}
