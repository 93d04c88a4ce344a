package kvcache_test

import (
	"math/rand"
	"reflect"
	"testing"

	"kvcache.example/kvcache"
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
