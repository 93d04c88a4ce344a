package kvcache_test

import (
	"math/rand"
	"testing"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

func TestFormatsComeFromTheLibraryTable(t *testing.T) {
	f16, err := kvcache.F16.Describe()
	must(t, err)
	if f16 != (kvcache.FormatInfo{Name: "f16", GroupSize: 1, GroupBytes: 2}) || f16.RowBytes(128) != 256 {
		t.Fatalf("F16.Describe() = %+v", f16)
	}
	f32, err := kvcache.F32.Describe()
	must(t, err)
	if f32.RowBytes(3) != 12 {
		t.Fatalf("F32 rows of 3 values take %d bytes", f32.RowBytes(3))
	}
	_, err = kvcache.DType(7).Describe()
	mustFail(t, err, kvcache.ErrInvalidArgument, "format")
}

func TestKAndVFormatsApart(t *testing.T) {
	ctx, _ := open(t, "", "")
	p := gqaParams()
	p.DType, p.VDType = kvcache.F16, kvcache.F32
	cache := newCache(t, ctx, p)
	shape, err := cache.Shape()
	must(t, err)
	if shape.KDType != kvcache.F16 || shape.VDType != kvcache.F32 {
		t.Fatalf("Shape = %+v", shape)
	}
	must(t, cache.CreateSeq(1))
	fill(t, cache, rand.New(rand.NewSource(3)), 1, 5)
	segments, err := cache.View(1, 0, 0)
	must(t, err)
	kBytes, vBytes, tokens := 0, 0, 0
	for _, s := range segments {
		kBytes, vBytes, tokens = kBytes+len(s.K), vBytes+len(s.V), tokens+len(s.Positions)
	}
	if tokens != 5 || kBytes != 5*headDim*2 || vBytes != 5*headDim*4 {
		t.Fatalf("viewed %d tokens in %d K and %d V bytes", tokens, kBytes, vBytes)
	}
}
