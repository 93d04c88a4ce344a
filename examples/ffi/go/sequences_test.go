package kvcache_test

import (
	"errors"
	"math/rand"
	"path/filepath"
	"reflect"
	"testing"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

// fill appends tokens at positions 0..n-1 of sequence id on both layers of a gqaCache.
func fill(t *testing.T, cache *kvcache.Cache, rng *rand.Rand, id int32, n int) {
	t.Helper()
	var b kvcache.Batch
	b.AddRun(id, 0, int32(n))
	for layer := int32(0); layer < 2; layer++ {
		k := kvcache.F32Tensor(random(rng, n*kvHeads*headDim))
		v := kvcache.F32Tensor(random(rng, n*kvHeads*headDim))
		must(t, cache.Append(layer, b, k, v))
	}
}

// look is the attention of query q at position pos over sequence id on layer 0.
func look(t *testing.T, cache *kvcache.Cache, id, pos int32, q []float32) []float32 {
	t.Helper()
	out := make([]float32, len(q))
	var b kvcache.Batch
	must(t, cache.Attend(0, *b.Add(id, pos), kvcache.F32Tensor(q), kvcache.AttentionParams{}, out))
	return out
}

func positions(t *testing.T, cache *kvcache.Cache, id int32) []int32 {
	t.Helper()
	segments, err := cache.View(id, 0, 0)
	must(t, err)
	var pos []int32
	for _, s := range segments {
		pos = append(pos, s.Positions...)
	}
	return pos
}

func TestForkTruncateRemoveRange(t *testing.T) {
	_, cache := open(t, "", gqaCache)
	rng := rand.New(rand.NewSource(4))
	must(t, cache.CreateSeq(0))
	fill(t, cache, rng, 0, 6)
	q := random(rng, qHeads*headDim)
	original := look(t, cache, 0, 10, q)

	must(t, cache.Fork(0, 1))
	stats, err := cache.Stats()
	must(t, err)
	if stats.Sequences != 2 || stats.BytesShared == 0 {
		t.Fatalf("after a fork: %d sequences, %d bytes shared", stats.Sequences, stats.BytesShared)
	}
	if got := look(t, cache, 1, 10, q); !reflect.DeepEqual(got, original) {
		t.Fatal("the fork attends differently from its source")
	}
	mustFail(t, cache.Fork(0, 1), kvcache.ErrAlreadyExists, "1")
	mustFail(t, cache.Fork(9, 3), kvcache.ErrNotFound, "9")

	must(t, cache.Truncate(1, 4))
	if got := positions(t, cache, 1); !reflect.DeepEqual(got, []int32{0, 1, 2, 3}) {
		t.Fatalf("truncated fork holds positions %v", got)
	}
	must(t, cache.RemoveRange(0, 1, 3))
	if got := positions(t, cache, 0); !reflect.DeepEqual(got, []int32{0, 3, 4, 5}) {
		t.Fatalf("after remove_range [1, 3): positions %v", got)
	}
	// The branches diverged: neither attends as the original did.
	if reflect.DeepEqual(look(t, cache, 0, 10, q), original) || reflect.DeepEqual(look(t, cache, 1, 10, q), original) {
		t.Fatal("truncate or remove_range changed nothing")
	}

	must(t, cache.RemoveSeq(1))
	mustFail(t, cache.RemoveSeq(1), kvcache.ErrNotFound, "1")
	stats, err = cache.Stats()
	must(t, err)
	if stats.Sequences != 1 || stats.BytesShared != 0 {
		t.Fatalf("after removing the fork: %d sequences, %d bytes shared", stats.Sequences, stats.BytesShared)
	}
}

func TestAStreamReachesTheBackendWhichTheCPUOneIgnores(t *testing.T) {
	_, withStream := open(t, "", gqaCache)
	_, without := open(t, "", gqaCache)
	// 0x1000 stands for an engine's stream: the CPU backend never reads it.
	must(t, withStream.SetStream(0x1000))
	q := random(rand.New(rand.NewSource(6)), qHeads*headDim)
	for _, cache := range []*kvcache.Cache{withStream, without} {
		must(t, cache.CreateSeq(0))
		fill(t, cache, rand.New(rand.NewSource(5)), 0, 9)
		must(t, cache.Fork(0, 1))
		must(t, cache.Truncate(1, 5))
	}
	if !reflect.DeepEqual(look(t, withStream, 1, 10, q), look(t, without, 1, 10, q)) {
		t.Fatal("a cache with a stream attends differently from one without")
	}
	must(t, withStream.SetStream(0))
	if !reflect.DeepEqual(look(t, withStream, 0, 10, q), look(t, without, 0, 10, q)) {
		t.Fatal("the default stream again attends differently")
	}
	must(t, withStream.Close())
	if err := withStream.SetStream(0x1000); !errors.Is(err, kvcache.ErrClosed) {
		t.Fatalf("SetStream on a closed cache: %v", err)
	}
}

func TestExportImportThroughBytesAndAFile(t *testing.T) {
	ctx, cache := open(t, "", gqaCache)
	rng := rand.New(rand.NewSource(5))
	must(t, cache.CreateSeq(0))
	fill(t, cache, rng, 0, 7)
	q := random(rng, qHeads*headDim)
	want := look(t, cache, 0, 9, q)

	data, err := cache.Export(0)
	must(t, err)
	size, err := cache.ExportSize(0)
	must(t, err)
	if size != len(data) {
		t.Fatalf("ExportSize = %d, Export wrote %d bytes", size, len(data))
	}

	other, err := ctx.NewCacheFromYAML(gqaCache)
	must(t, err)
	defer other.Close()
	must(t, other.Import(3, data))
	if got := look(t, other, 3, 9, q); !reflect.DeepEqual(got, want) {
		t.Fatal("the imported sequence attends differently")
	}

	path := filepath.Join(t.TempDir(), "seq.kvcseq")
	must(t, cache.ExportFile(0, path))
	must(t, other.ImportFile(4, path))
	if got := look(t, other, 4, 9, q); !reflect.DeepEqual(got, want) {
		t.Fatal("the sequence imported from a file attends differently")
	}

	// Errors carry the library's code and message; a failed import creates no sequence.
	corrupt := append([]byte(nil), data...)
	corrupt[len(corrupt)/2] ^= 0xff
	mustFail(t, other.Import(5, corrupt), kvcache.ErrInvalidArgument, "")
	mustFail(t, other.Import(5, data[:10]), kvcache.ErrInvalidArgument, "")
	must(t, other.CreateSeq(5))
	mustFail(t, other.Import(3, data), kvcache.ErrAlreadyExists, "3")
	_, err = cache.Export(7)
	mustFail(t, err, kvcache.ErrNotFound, "7")
	mustFail(t, cache.ExportFile(0, "/nonexistent/dir/seq.kvcseq"), kvcache.ErrIO, "/nonexistent/dir")
	mustFail(t, other.ImportFile(6, filepath.Join(t.TempDir(), "absent")), kvcache.ErrNotFound, "absent")
}
