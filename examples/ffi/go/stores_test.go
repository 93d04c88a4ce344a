package kvcache_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"testing"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

// The stores of storesContext: a host store and a disk store.
var stores = []string{"mem", "files"}

const prefilled = 20 // tokens fillStored appends

// storesContext is a context with a host store "mem" and a disk store "files" in a fresh
// folder, closed when the test ends.
func storesContext(t *testing.T) *kvcache.Context {
	t.Helper()
	ctx, err := kvcache.NewContext(fmt.Sprintf(`
threads: 2
stores:
  mem: { plugin: host, params: { capacity: 64MiB } }
  files: { plugin: disk, params: { path: '%s' } }
`, t.TempDir()))
	must(t, err)
	t.Cleanup(func() {
		if err := ctx.Close(); err != nil {
			t.Error(err)
		}
	})
	return ctx
}

func storesCache(t *testing.T, ctx *kvcache.Context) *kvcache.Cache {
	t.Helper()
	cache, err := ctx.NewCacheFromYAML(gqaCache)
	must(t, err)
	t.Cleanup(func() { cache.Close() })
	return cache
}

// fillStored creates sequence id holding positions 0..prefilled-1 on both layers, the same
// K/V for the same id.
func fillStored(t *testing.T, cache *kvcache.Cache, id int32) {
	t.Helper()
	must(t, cache.CreateSeq(id))
	fill(t, cache, rand.New(rand.NewSource(int64(id)+40)), id, prefilled)
}

// attendBoth is the attention of fixed queries at position 100 over sequence id, on both
// layers, as bit patterns.
func attendBoth(t *testing.T, cache *kvcache.Cache, id int32) []uint32 {
	t.Helper()
	q := random(rand.New(rand.NewSource(99)), qHeads*headDim)
	var bits []uint32
	for layer := int32(0); layer < 2; layer++ {
		out := make([]float32, len(q))
		b := kvcache.Batch{SeqIDs: []int32{id}, NTokens: []int32{1}, Positions: []int32{100}}
		must(t, cache.Attend(layer, b, kvcache.F32Tensor(q), kvcache.AttentionParams{}, out))
		for _, x := range out {
			bits = append(bits, math.Float32bits(x))
		}
	}
	return bits
}

func sameBits(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// prompt is the token ids of fillStored's positions.
func prompt() []int32 {
	ids := make([]int32, prefilled)
	for i := range ids {
		ids[i] = int32(1000 + i)
	}
	return ids
}

func TestStorePluginsAreListedAsStores(t *testing.T) {
	ctx := storesContext(t)
	plugins, err := ctx.Plugins()
	must(t, err)
	kinds := map[string]kvcache.PluginKind{}
	for _, p := range plugins {
		kinds[p.Name] = p.Kind
	}
	if kinds["host"] != kvcache.PluginStore || kinds["disk"] != kvcache.PluginStore {
		t.Fatalf("plugins: %+v", plugins)
	}
}

func TestOffloadThenRestoreAttendsBitForBit(t *testing.T) {
	cache := storesCache(t, storesContext(t))
	for _, store := range stores {
		fillStored(t, cache, 0)
		before := attendBoth(t, cache, 0)
		must(t, cache.Offload(0, store, "seq-0"))
		_, err := cache.Len(0, 0, 0)
		mustFail(t, err, kvcache.ErrNotFound, "0")
		stats, err := cache.Stats()
		must(t, err)
		if stats.Sequences != 0 || stats.BytesUsed != 0 {
			t.Fatalf("%s: after the offload %d sequences hold %d bytes", store, stats.Sequences, stats.BytesUsed)
		}

		must(t, cache.Restore(5, store, "seq-0"))
		if !sameBits(attendBoth(t, cache, 5), before) {
			t.Fatalf("%s: the restored sequence attends differently", store)
		}
		// The value stays in the store: it restores again, under another id only.
		mustFail(t, cache.Restore(5, store, "seq-0"), kvcache.ErrAlreadyExists, "5")
		must(t, cache.Restore(6, store, "seq-0"))
		if !sameBits(attendBoth(t, cache, 6), before) {
			t.Fatalf("%s: the second restore attends differently", store)
		}
		must(t, cache.RemoveSeq(5))
		must(t, cache.RemoveSeq(6))
	}
}

func TestMissingKeysAndUnknownStoresAreNotFound(t *testing.T) {
	ctx := storesContext(t)
	cache := storesCache(t, ctx)
	for _, store := range stores {
		err := cache.Restore(0, store, "never-written")
		mustFail(t, err, kvcache.ErrNotFound, store)
		var e *kvcache.Error
		if !errors.As(err, &e) || e.Op != "kvc_seq_restore" || e.Code != kvcache.ErrNotFound {
			t.Fatalf("%s: %#v", store, err)
		}
		if stats, err := cache.Stats(); err != nil || stats.Sequences != 0 {
			t.Fatalf("%s: a failed restore left %d sequences (%v)", store, stats.Sequences, err)
		}
	}
	fillStored(t, cache, 0)
	mustFail(t, cache.Offload(0, "nowhere", "seq-0"), kvcache.ErrNotFound, "nowhere")
	if n, err := cache.Len(0, 1, 1); err != nil || n != prefilled {
		t.Fatalf("after a failed offload the sequence holds %d tokens (%v)", n, err)
	}
	mustFail(t, cache.Restore(1, "nowhere", "seq-0"), kvcache.ErrNotFound, "nowhere")
	mustFail(t, ctx.StoreDrop("nowhere", "seq-0"), kvcache.ErrNotFound, "nowhere")
	p := kvcache.Prefix{Model: "test-model", TokenIDs: prompt()}
	_, err := cache.SavePrefix(0, "nowhere", p)
	mustFail(t, err, kvcache.ErrNotFound, "nowhere")
	_, err = cache.LoadPrefix(1, "nowhere", p)
	mustFail(t, err, kvcache.ErrNotFound, "nowhere")
}

func TestADroppedValueIsGone(t *testing.T) {
	ctx := storesContext(t)
	cache := storesCache(t, ctx)
	for _, store := range stores {
		fillStored(t, cache, 0)
		must(t, cache.Offload(0, store, "seq-0"))
		must(t, ctx.StoreDrop(store, "seq-0"))
		mustFail(t, ctx.StoreDrop(store, "seq-0"), kvcache.ErrNotFound, store)
		mustFail(t, cache.Restore(0, store, "seq-0"), kvcache.ErrNotFound, store)
	}
}

func TestAPrefixSavedByOneCacheLoadsIntoAnother(t *testing.T) {
	ctx := storesContext(t)
	saver, loader := storesCache(t, ctx), storesCache(t, ctx)
	fillStored(t, saver, 0)
	// The reference: the saver's sequence cut to its two whole chunks of 8 tokens.
	must(t, saver.Fork(0, 1))
	must(t, saver.Truncate(1, 16))
	want := attendBoth(t, saver, 1)
	p := kvcache.Prefix{Model: "test-model", TokenIDs: prompt(), ChunkTokens: 8}
	for i, store := range stores {
		for again := 0; again < 2; again++ {
			if n, err := saver.SavePrefix(0, store, p); err != nil || n != 16 {
				t.Fatalf("%s: SavePrefix = %d, %v; want 16", store, n, err)
			}
		}

		id := int32(10 * i)
		if n, err := loader.LoadPrefix(id, store, p); err != nil || n != 16 {
			t.Fatalf("%s: LoadPrefix = %d, %v; want 16", store, n, err)
		}
		if n, err := loader.Len(id, 1, 1); err != nil || n != 16 {
			t.Fatalf("%s: the loaded sequence holds %d tokens (%v)", store, n, err)
		}
		if !sameBits(attendBoth(t, loader, id), want) {
			t.Fatalf("%s: the loaded prefix attends differently from the saved one", store)
		}
		_, err := loader.LoadPrefix(id, store, p)
		mustFail(t, err, kvcache.ErrAlreadyExists, fmt.Sprint(id))

		// A prompt that differs from token 10 on shares the first chunk only.
		diverging := p
		diverging.TokenIDs = prompt()
		diverging.TokenIDs[10] = 7
		if n, err := loader.LoadPrefix(id+1, store, diverging); err != nil || n != 8 {
			t.Fatalf("%s: LoadPrefix of a diverging prompt = %d, %v; want 8", store, n, err)
		}
		// Another model's K/V is never restored: the new sequence is empty.
		otherModel := p
		otherModel.Model = "other-model"
		if n, err := loader.LoadPrefix(id+2, store, otherModel); err != nil || n != 0 {
			t.Fatalf("%s: LoadPrefix of another model = %d, %v; want 0", store, n, err)
		}
		if n, err := loader.Len(id+2, 0, 0); err != nil || n != 0 {
			t.Fatalf("%s: the other model's sequence holds %d tokens (%v)", store, n, err)
		}
	}
}

func TestAPrefixWithoutAChunkSizeUsesTheDefault(t *testing.T) {
	cache := storesCache(t, storesContext(t))
	must(t, cache.CreateSeq(0))
	fill(t, cache, rand.New(rand.NewSource(41)), 0, 300)
	ids := make([]int32, 300)
	// 300 tokens hold one whole chunk of the default 256.
	n, err := cache.SavePrefix(0, "mem", kvcache.Prefix{Model: "test-model", TokenIDs: ids})
	if err != nil || n != 256 {
		t.Fatalf("SavePrefix with the default chunk size = %d, %v; want 256", n, err)
	}
	_, err = cache.SavePrefix(0, "mem", kvcache.Prefix{Model: "test-model", TokenIDs: ids, ChunkTokens: -1})
	mustFail(t, err, kvcache.ErrInvalidArgument, "chunk_tokens")
}
