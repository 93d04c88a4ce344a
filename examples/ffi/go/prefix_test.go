package kvcache_test

import (
	"bytes"
	"math/rand"
	"reflect"
	"testing"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

const published = 10 // tokens fillPublished appends: two whole blocks of 4, and 2 more

// prefixParams is gqaParams in blocks of 4 tokens with prefix caching on.
func prefixParams() kvcache.CacheParams {
	p := gqaParams()
	p.BlockTokens = 4
	p.PrefixCache = true
	return p
}

// fillPublished creates sequence id holding positions 0..published-1 on both layers, the same
// K/V for every id.
func fillPublished(t *testing.T, cache *kvcache.Cache, id int32) {
	t.Helper()
	must(t, cache.CreateSeq(id))
	fill(t, cache, rand.New(rand.NewSource(5)), id, published)
}

// publishedPrompt is the token ids of fillPublished's positions.
func publishedPrompt() kvcache.Prefix {
	ids := make([]int32, published)
	for i := range ids {
		ids[i] = int32(2000 + i)
	}
	return kvcache.Prefix{Model: "test-model", TokenIDs: ids}
}

// rows is the K bytes, V bytes and positions (id, layer, kvHead) stores, in storage order.
func rows(t *testing.T, cache *kvcache.Cache, id, layer, kvHead int32) (k, v []byte, pos []int32) {
	t.Helper()
	segments, err := cache.View(id, layer, kvHead)
	must(t, err)
	for _, s := range segments {
		k, v, pos = append(k, s.K...), append(v, s.V...), append(pos, s.Positions...)
	}
	return k, v, pos
}

// checkAttached checks that sequence id of got holds the first 8 rows of sequence src of
// want on every (layer, KV head).
func checkAttached(t *testing.T, got *kvcache.Cache, id int32, want *kvcache.Cache, src int32) {
	t.Helper()
	const row = headDim * 4 // f32
	for layer := int32(0); layer < 2; layer++ {
		for head := int32(0); head < kvHeads; head++ {
			if n, err := got.Len(id, layer, head); err != nil || n != 8 {
				t.Fatalf("layer %d head %d: the attached sequence holds %d tokens (%v); want 8", layer, head, n, err)
			}
			k, v, pos := rows(t, got, id, layer, head)
			wantK, wantV, wantPos := rows(t, want, src, layer, head)
			if !bytes.Equal(k, wantK[:8*row]) || !bytes.Equal(v, wantV[:8*row]) || !reflect.DeepEqual(pos, wantPos[:8]) {
				t.Fatalf("layer %d head %d: the attached rows differ from the published sequence's first 8", layer, head)
			}
		}
	}
}

func TestAPublishedPromptIsFoundAndAttachedByWholeBlocks(t *testing.T) {
	ctx, _ := open(t, "", "")
	cache := newCache(t, ctx, prefixParams())
	fillPublished(t, cache, 0)
	p := publishedPrompt()
	if n, err := cache.PublishPrefix(0, p); err != nil || n != 8 {
		t.Fatalf("PublishPrefix = %d, %v; want 8", n, err)
	}
	if n, err := cache.LookupPrefix(p); err != nil || n != 8 {
		t.Fatalf("LookupPrefix = %d, %v; want 8", n, err)
	}
	diverging := publishedPrompt()
	diverging.TokenIDs[5] = 7
	if n, err := cache.LookupPrefix(diverging); err != nil || n != 4 {
		t.Fatalf("LookupPrefix of a prompt differing at token 5 = %d, %v; want 4", n, err)
	}

	if n, err := cache.AttachPrefix(1, p); err != nil || n != 8 {
		t.Fatalf("AttachPrefix = %d, %v; want 8", n, err)
	}
	checkAttached(t, cache, 1, cache, 0)
	stats, err := cache.Stats()
	must(t, err)
	if stats.BytesShared == 0 {
		t.Fatal("the attached sequence shares no bytes")
	}

	// The published blocks outlive the sequences that held them.
	must(t, cache.RemoveSeq(0))
	must(t, cache.RemoveSeq(1))
	stats, err = cache.Stats()
	must(t, err)
	if stats.BytesCached == 0 || stats.BytesCached != stats.BytesUsed || stats.PrefixHits != 1 || stats.PrefixTokensReused != 8 {
		t.Fatalf("after removing both sequences: %+v; want every used byte cached, 1 hit, 8 tokens reused", stats)
	}
	if n, err := cache.LookupPrefix(p); err != nil || n != 8 {
		t.Fatalf("LookupPrefix after the removals = %d, %v; want 8", n, err)
	}
}

func TestAWriteThroughStoreCarriesTheBlocksToAnotherCache(t *testing.T) {
	ctx := storesContext(t)
	p := prefixParams()
	p.PrefixStore = "mem"
	reader := newCache(t, ctx, p)
	p.PrefixWriteThrough = true
	writer := newCache(t, ctx, p)
	shape, err := writer.Shape()
	must(t, err)
	if !shape.PrefixCache || shape.PrefixStore != "mem" || !shape.PrefixWriteThrough {
		t.Fatalf("Shape = %+v; want the prefix cache's params", shape)
	}

	fillPublished(t, writer, 0)
	prompt := publishedPrompt()
	if n, err := writer.PublishPrefix(0, prompt); err != nil || n != 8 {
		t.Fatalf("PublishPrefix = %d, %v; want 8", n, err)
	}
	// The reader's own cache holds nothing; its attach continues in the store.
	if n, err := reader.LookupPrefix(prompt); err != nil || n != 0 {
		t.Fatalf("LookupPrefix in the reader = %d, %v; want 0", n, err)
	}
	if n, err := reader.AttachPrefix(0, prompt); err != nil || n != 8 {
		t.Fatalf("AttachPrefix from the store = %d, %v; want 8", n, err)
	}
	checkAttached(t, reader, 0, writer, 0)
	// What the attach loaded, it published.
	if n, err := reader.LookupPrefix(prompt); err != nil || n != 8 {
		t.Fatalf("LookupPrefix in the reader after the attach = %d, %v; want 8", n, err)
	}
}

func TestAttachNeedsAPrefixCacheAndANewSequenceID(t *testing.T) {
	ctx, _ := open(t, "", "")
	p := publishedPrompt()
	plainParams := prefixParams()
	plainParams.PrefixCache = false
	plain := newCache(t, ctx, plainParams)
	fillPublished(t, plain, 0)
	_, err := plain.AttachPrefix(1, p)
	mustFail(t, err, kvcache.ErrUnsupported, "")
	_, err = plain.Len(1, 0, 0)
	mustFail(t, err, kvcache.ErrNotFound, "")
	_, err = plain.PublishPrefix(0, p)
	mustFail(t, err, kvcache.ErrUnsupported, "")

	cache := newCache(t, ctx, prefixParams())
	fillPublished(t, cache, 0)
	if n, err := cache.PublishPrefix(0, p); err != nil || n != 8 {
		t.Fatalf("PublishPrefix = %d, %v; want 8", n, err)
	}
	_, err = cache.AttachPrefix(0, p)
	mustFail(t, err, kvcache.ErrAlreadyExists, "")
	if n, err := cache.Len(0, 1, 1); err != nil || n != published {
		t.Fatalf("after a refused attach sequence 0 holds %d tokens (%v); want %d", n, err, published)
	}
	stats, err := cache.Stats()
	must(t, err)
	if stats.PrefixHits != 0 {
		t.Fatalf("a refused attach counts as %d hits", stats.PrefixHits)
	}
}
