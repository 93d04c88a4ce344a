package kvcache_test

import (
	"encoding/binary"
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

func TestQuantizedFormats(t *testing.T) {
	q8, err := kvcache.Q8_0.Describe()
	must(t, err)
	q4, err := kvcache.Q4_0.Describe()
	must(t, err)
	if q8 != (kvcache.FormatInfo{Name: "q8_0", GroupSize: 32, GroupBytes: 34}) ||
		q4 != (kvcache.FormatInfo{Name: "q4_0", GroupSize: 32, GroupBytes: 18}) {
		t.Fatalf("Describe() = %+v, %+v", q8, q4)
	}
	ctx, _ := open(t, "", "")
	p := gqaParams()
	p.HeadDim = 64
	p.DType, p.VDType = kvcache.Q8_0, kvcache.Q4_0
	cache := newCache(t, ctx, p)
	shape, err := cache.Shape()
	must(t, err)
	if shape.KDType != kvcache.Q8_0 || shape.VDType != kvcache.Q4_0 {
		t.Fatalf("Shape = %+v", shape)
	}
	must(t, cache.CreateSeq(1))
	must(t, cache.Reserve(1, 100))
	stats, err := cache.Stats()
	must(t, err)
	heads := int(p.Layers * p.KVHeads)
	if rows := heads * 100 * (q8.RowBytes(64) + q4.RowBytes(64)); int(stats.BytesUsed) < rows {
		t.Fatalf("100 reserved tokens take %d bytes, less than their %d bytes of rows", stats.BytesUsed, rows)
	}
	p.HeadDim = 40
	_, err = ctx.NewCache(p)
	mustFail(t, err, kvcache.ErrInvalidArgument, "q8_0")
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

func TestRotatedKeys(t *testing.T) {
	ctx, _ := open(t, "", "")
	p := gqaParams()
	p.HeadDim, p.KDType, p.KRotation = 64, kvcache.Q4_0, kvcache.RotationHadamard
	cache := newCache(t, ctx, p)
	shape, err := cache.Shape()
	must(t, err)
	if shape.KRotation != kvcache.RotationHadamard {
		t.Fatalf("Shape = %+v", shape)
	}
	must(t, cache.CreateSeq(1))
	var b kvcache.Batch
	b.AddRun(1, 0, 3)
	rng := rand.New(rand.NewSource(5))
	k := kvcache.F32Tensor(random(rng, 3*kvHeads*64))
	v := kvcache.F32Tensor(random(rng, 3*kvHeads*64))
	must(t, cache.Append(0, b, k, v))
	image, err := cache.Export(1)
	must(t, err)
	if version := binary.LittleEndian.Uint32(image[8:12]); version != 4 {
		t.Fatalf("a rotated sequence exports as version %d", version)
	}
	p.KRotation = kvcache.RotationNone
	plain := newCache(t, ctx, p)
	mustFail(t, plain.Import(1, image), kvcache.ErrInvalidArgument, "k_rotation hadamard")

	p.KRotation = 7
	_, err = ctx.NewCache(p)
	mustFail(t, err, kvcache.ErrInvalidArgument, "k_rotation")
}
