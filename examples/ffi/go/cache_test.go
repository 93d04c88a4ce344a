package kvcache_test

import (
	"testing"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

func TestCacheParamsRoundTrip(t *testing.T) {
	ctx, fromYAML := open(t, "", gqaCache)
	p := gqaParams()
	p.Layout = kvcache.Contiguous
	p.GrowthFactor = 1.5
	cache := newCache(t, ctx, p)

	shape, err := cache.Shape()
	must(t, err)
	if shape.Layers != 2 || shape.KVHeads != kvHeads || shape.QHeads != qHeads || shape.HeadDim != headDim ||
		shape.DType != kvcache.F32 || shape.Layout != kvcache.Contiguous || shape.GrowthFactor != 1.5 ||
		shape.MemoryLimit != 1<<20 {
		t.Fatalf("Shape = %+v", shape)
	}
	shape, err = fromYAML.Shape()
	must(t, err)
	if shape.Layout != kvcache.Paged || shape.BlockTokens != 4 || shape.DType.String() != "f32" ||
		shape.DType.Size() != 4 || kvcache.BF16.Size() != 2 {
		t.Fatalf("Shape from YAML = %+v", shape)
	}
}

func TestDemotionParams(t *testing.T) {
	p := kvcache.DefaultCacheParams()
	if p.DemoteKDType != kvcache.NotDemoted || p.DemoteVDType != kvcache.NotDemoted || p.DemoteKeep != 0.25 {
		t.Fatalf("demotion defaults = %v, %v, %v", p.DemoteKDType, p.DemoteVDType, p.DemoteKeep)
	}
	ctx, _ := open(t, "", "")
	cache := newCache(t, ctx, gqaParams())
	shape, err := cache.Shape()
	must(t, err)
	if shape.DemoteKDType != kvcache.NotDemoted || shape.DemoteVDType != kvcache.NotDemoted || shape.DemoteKeep != 0.25 {
		t.Fatalf("demotion read back = %v, %v, %v", shape.DemoteKDType, shape.DemoteVDType, shape.DemoteKeep)
	}
	stats, err := cache.Stats()
	must(t, err)
	if stats.TokensDemoted != 0 {
		t.Fatalf("TokensDemoted = %d on a new cache", stats.TokensDemoted)
	}

	p = gqaParams()
	p.DemoteKDType = kvcache.Q4_0
	_, err = ctx.NewCache(p)
	mustFail(t, err, kvcache.ErrInvalidArgument, "need a policy")
	p.Policy, p.Budget, p.DemoteKeep = "window", 8, 2
	_, err = ctx.NewCache(p)
	mustFail(t, err, kvcache.ErrInvalidArgument, "demote_keep must be in [0, 1]")
	p.DemoteKeep, p.DemoteVDType = 0.25, 9
	_, err = ctx.NewCache(p)
	mustFail(t, err, kvcache.ErrInvalidArgument, "demote_v_dtype is neither -1 nor a kvc_dtype")
}

func TestBadCacheParams(t *testing.T) {
	ctx, _ := open(t, "", "")
	p := gqaParams()
	p.QHeads = 3 // not a multiple of kv_heads
	_, err := ctx.NewCache(p)
	mustFail(t, err, kvcache.ErrInvalidArgument, "q_heads")

	p = gqaParams()
	p.Backend = "no_such_backend"
	_, err = ctx.NewCache(p)
	mustFail(t, err, kvcache.ErrNotFound, "no_such_backend")

	_, err = ctx.NewCacheFromYAML("cache: { head_dim: 0 }\n")
	mustFail(t, err, kvcache.ErrConfig, "head_dim")
}

func TestSequencesAndTheMemoryLimit(t *testing.T) {
	_, cache := open(t, "", gqaCache)
	must(t, cache.CreateSeq(3))
	mustFail(t, cache.CreateSeq(3), kvcache.ErrAlreadyExists, "3")
	mustFail(t, cache.CreateSeq(-1), kvcache.ErrInvalidArgument, "-1")

	mustFail(t, cache.Reserve(3, 1<<20), kvcache.ErrOutOfMemory, "")
	stats, err := cache.Stats()
	must(t, err)
	if stats.BytesUsed != 0 {
		t.Fatalf("a failed reserve holds %d bytes", stats.BytesUsed)
	}
	must(t, cache.Reserve(3, 16))
	if n, err := cache.Len(3, 0, 0); err != nil || n != 0 {
		t.Fatalf("Len after Reserve = %d, %v", n, err)
	}
	_, err = cache.Len(3, 5, 0)
	mustFail(t, err, kvcache.ErrInvalidArgument, "")
	must(t, cache.RemoveSeq(3))
}
