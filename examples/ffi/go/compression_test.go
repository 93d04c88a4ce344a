package kvcache_test

import (
	"math/rand"
	"reflect"
	"testing"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

func gqaParams() kvcache.CacheParams {
	p := kvcache.DefaultCacheParams()
	p.Layers, p.KVHeads, p.QHeads, p.HeadDim = 2, kvHeads, qHeads, headDim
	p.DType = kvcache.F32
	p.MemoryLimit = 1 << 20
	return p
}

func newCache(t *testing.T, ctx *kvcache.Context, p kvcache.CacheParams) *kvcache.Cache {
	t.Helper()
	cache, err := ctx.NewCache(p)
	must(t, err)
	t.Cleanup(func() { cache.Close() })
	return cache
}

func TestCompressKeepsSinksAndRecentAndCountsEvictions(t *testing.T) {
	ctx, _ := open(t, "", "")
	p := gqaParams()
	p.Policy, p.Budget, p.Sinks = "streaming", 6, 2
	cache := newCache(t, ctx, p)

	info, err := cache.PolicyInfo()
	must(t, err)
	if want := (kvcache.PolicyInfo{Name: "streaming", Sinks: 2, BudgetTokens: 6}); info != want {
		t.Fatalf("PolicyInfo = %+v, want %+v", info, want)
	}

	must(t, cache.CreateSeq(0))
	fill(t, cache, rand.New(rand.NewSource(6)), 0, 10)
	must(t, cache.Compress(kvcache.AllLayers, 0))
	if got := positions(t, cache, 0); !reflect.DeepEqual(got, []int32{0, 1, 6, 7, 8, 9}) {
		t.Fatalf("after compression: positions %v", got)
	}
	stats, err := cache.Stats()
	must(t, err)
	// Per (layer, KV head): 6 kept, 4 evicted; 2 layers x 2 KV heads.
	if stats.TokensStored != 24 || stats.TokensEvicted != 16 || stats.Sequences != 1 {
		t.Fatalf("stats after compression: %+v", stats)
	}
	if stats.BytesUsed == 0 || stats.BytesUsed > stats.BytesPeak || stats.BytesLimit != 1<<20 {
		t.Fatalf("byte counters: %+v", stats)
	}
	peak, err := cache.EstimatePeakBytes(64, 16, 8)
	must(t, err)
	if peak == 0 || peak > stats.BytesLimit {
		t.Fatalf("EstimatePeakBytes = %d", peak)
	}
}

func TestReportedStatisticsDriveTheScores(t *testing.T) {
	ctx, _ := open(t, "", "")
	p := gqaParams()
	p.Policy, p.Budget = "h2o", 4
	p.PolicyParams = []kvcache.KeyValue{{Key: "recent_ratio", Value: "0.5"}}
	cache := newCache(t, ctx, p)

	must(t, cache.CreateSeq(0))
	fill(t, cache, rand.New(rand.NewSource(7)), 0, 8)
	// The last two tokens are recent; of the others, positions 1 and 3 are heavy hitters.
	must(t, cache.ReportStats(0, 0, 0, kvcache.StatAttnSum, []float32{0.1, 5, 0.2, 4, 0.3, 0.1, 0.1, 0.1}))
	mustFail(t, cache.ReportStats(0, 0, 0, kvcache.StatAttnLast, make([]float32, 8)),
		kvcache.ErrInvalidArgument, "")
	must(t, cache.Compress(0, 0))
	if got := positions(t, cache, 0); !reflect.DeepEqual(got, []int32{1, 3, 6, 7}) {
		t.Fatalf("h2o kept positions %v", got)
	}
	// Layer 1 was not compressed.
	if n, err := cache.Len(0, 1, 0); err != nil || n != 8 {
		t.Fatalf("layer 1 holds %d tokens (%v), want 8", n, err)
	}
}

func TestPolicyErrors(t *testing.T) {
	ctx, plain := open(t, "", gqaCache)
	_, err := plain.PolicyInfo()
	mustFail(t, err, kvcache.ErrNotFound, "")

	p := gqaParams()
	p.Policy = "no_such_policy"
	_, err = ctx.NewCache(p)
	mustFail(t, err, kvcache.ErrNotFound, "no_such_policy")
	_, err = ctx.NewCacheFromYAML(gqaCache + "policy: { name: no_such_policy, budget: 4 }\n")
	mustFail(t, err, kvcache.ErrNotFound, "no_such_policy")

	p.Policy = "h2o"
	p.Budget = 4
	p.PolicyParams = []kvcache.KeyValue{{Key: "recent_ratio", Value: "2"}}
	_, err = ctx.NewCache(p)
	mustFail(t, err, kvcache.ErrConfig, "recent_ratio")
	// The context and its other cache are unaffected.
	must(t, plain.CreateSeq(0))
}

// storedPositions is what each (layer, KV head) of sequence 0 holds, layer by layer.
func storedPositions(t *testing.T, cache *kvcache.Cache) [][]int32 {
	t.Helper()
	var heads [][]int32
	for layer := int32(0); layer < 2; layer++ {
		for head := int32(0); head < kvHeads; head++ {
			segments, err := cache.View(0, layer, head)
			must(t, err)
			var pos []int32
			for _, s := range segments {
				pos = append(pos, s.Positions...)
			}
			heads = append(heads, pos)
		}
	}
	return heads
}

func TestOnceWithAMarkedLastPromptChunkCompressesEachLayerRightAfterIt(t *testing.T) {
	ctx, _ := open(t, "", "")
	p := gqaParams()
	p.Policy, p.Budget, p.Prefill = "tova", 12, kvcache.PrefillOnce
	marked, unmarked := newCache(t, ctx, p), newCache(t, ctx, p)
	must(t, marked.CreateSeq(0))
	must(t, unmarked.CreateSeq(0))
	rng := rand.New(rand.NewSource(16))
	// Both caches get the same q, k and v for the same call.
	attend := func(layer int32, first, n int32, end bool) {
		t.Helper()
		b := kvcache.Batch{SeqIDs: []int32{0}, NTokens: []int32{n}, Positions: make([]int32, n)}
		for i := range b.Positions {
			b.Positions[i] = first + int32(i)
		}
		q := kvcache.F32Tensor(random(rng, int(n)*qHeads*headDim))
		k := kvcache.F32Tensor(random(rng, int(n)*kvHeads*headDim))
		v := kvcache.F32Tensor(random(rng, int(n)*kvHeads*headDim))
		out := make([]float32, int(n)*qHeads*headDim)
		must(t, unmarked.AppendAttend(layer, b, q, k, v, kvcache.AttentionParams{}, out))
		if end {
			b.PromptEnd = []bool{true}
		}
		must(t, marked.AppendAttend(layer, b, q, k, v, kvcache.AttentionParams{}, out))
	}
	length := func(cache *kvcache.Cache, layer, head int32) int32 {
		t.Helper()
		n, err := cache.Len(0, layer, head)
		must(t, err)
		return n
	}

	two := kvcache.Batch{SeqIDs: []int32{0}, NTokens: []int32{1}, Positions: []int32{0}, PromptEnd: []bool{true, false}}
	kv := kvcache.F32Tensor(make([]float32, kvHeads*headDim))
	mustFail(t, marked.Append(0, two, kv, kv), kvcache.ErrInvalidArgument, "2 PromptEnd entries for 1 SeqIDs")
	for layer := int32(0); layer < 2; layer++ {
		attend(layer, 0, 20, false)
	}
	for layer := int32(0); layer < 2; layer++ {
		attend(layer, 20, 20, true)
		for head := int32(0); head < kvHeads; head++ {
			if m, u := length(marked, layer, head), length(unmarked, layer, head); m != 12 || u != 40 {
				t.Fatalf("layer %d head %d after the last chunk: marked %d tokens, unmarked %d; want 12 and 40", layer, head, m, u)
			}
			if n := length(marked, 1, head); layer == 0 && n != 20 {
				t.Fatalf("layer 1 holds %d tokens before its last chunk, want 20", n)
			}
		}
	}
	// The unmarked cache compresses the same statistics at the first decode token, so both
	// keep the same tokens; the marked one does not compress again.
	for layer := int32(0); layer < 2; layer++ {
		attend(layer, 40, 1, false)
	}
	kept := storedPositions(t, marked)
	if want := storedPositions(t, unmarked); !reflect.DeepEqual(kept, want) {
		t.Fatalf("marked cache keeps %v, unmarked %v", kept, want)
	}
	for _, pos := range kept {
		if len(pos) != 13 {
			t.Fatalf("after one decode token a head holds %v, want 13 tokens", pos)
		}
	}
}

func TestEstimateFollowsAMarkedWholePromptPrefill(t *testing.T) {
	const prompt, budget = 2048, 512
	ctx, _ := open(t, "", "")
	p := gqaParams()
	p.DType, p.Layout, p.BlockTokens = kvcache.F16, kvcache.Paged, 16
	p.Policy, p.Budget, p.Prefill = "knorm", budget, kvcache.PrefillOnce
	cache := newCache(t, ctx, p)

	r := kvcache.EstimateRequest{PromptTokens: prompt, ChunkTokens: prompt, NewTokens: 4}
	unmarked, err := cache.Estimate(r)
	must(t, err)
	legacy, err := cache.EstimatePeakBytes(prompt, prompt, 4)
	must(t, err)
	r.MarksPromptEnd = true
	marked, err := cache.Estimate(r)
	must(t, err)
	// f16 K and V and an int32 position per token; marked, one layer holds the whole prompt
	// while the other holds its budget.
	const tokenBytes = 2*headDim*2 + 4
	if want := uint64((prompt + (2-1)*budget) * tokenBytes * kvHeads); marked != want {
		t.Fatalf("marked estimate %d, want %d", marked, want)
	}
	if want := uint64(2 * prompt * tokenBytes * kvHeads); unmarked != legacy || unmarked != want {
		t.Fatalf("unmarked estimate %d, EstimatePeakBytes %d, want %d", unmarked, legacy, want)
	}

	r.ChunkTokens = 0
	_, err = cache.Estimate(r)
	mustFail(t, err, kvcache.ErrInvalidArgument, "chunk_tokens")
}
