package kvcache_test

import (
	"math"
	"math/rand"
	"testing"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

const (
	qHeads  = 4
	kvHeads = 2 // two query heads per KV head
	headDim = 8
)

const gqaCache = `
cache:
  layers: 2
  kv_heads: 2
  q_heads: 4
  head_dim: 8
  dtype: f32
  block_tokens: 4
  memory_limit: 1MiB
`

// step appends one batch on layer 0 with random Q/K/V, checks the output against the naive
// attention over each sequence's history, and records the new rows in the histories.
func step(t *testing.T, cache *kvcache.Cache, rng *rand.Rand, b kvcache.Batch, hist map[int32]*history) {
	t.Helper()
	total := len(b.Positions)
	q := random(rng, total*qHeads*headDim)
	k := random(rng, total*kvHeads*headDim)
	v := random(rng, total*kvHeads*headDim)
	out := make([]float32, len(q))
	err := cache.AppendAttend(0, b, kvcache.F32Tensor(q), kvcache.F32Tensor(k), kvcache.F32Tensor(v),
		kvcache.AttentionParams{}, out)
	must(t, err)

	row := 0
	for i, id := range b.SeqIDs {
		h := hist[id]
		for j := 0; j < int(b.NTokens[i]); j, row = j+1, row+1 {
			kvRow := k[row*kvHeads*headDim : (row+1)*kvHeads*headDim]
			vRow := v[row*kvHeads*headDim : (row+1)*kvHeads*headDim]
			h.add(b.Positions[row], kvRow, vRow)
		}
	}
	// Causal by position: every query of a chunk sees the whole chunk up to itself only.
	for row = 0; row < total; row++ {
		id := seqOfRow(b, row)
		want := hist[id].attend(q[row*qHeads*headDim:(row+1)*qHeads*headDim], b.Positions[row], qHeads, kvHeads, headDim)
		got := out[row*qHeads*headDim : (row+1)*qHeads*headDim]
		for i := range want {
			if math.Abs(float64(got[i]-want[i])) > 1e-5 {
				t.Fatalf("sequence %d, row %d, element %d: got %g, want %g", id, row, i, got[i], want[i])
			}
		}
	}
}

func seqOfRow(b kvcache.Batch, row int) int32 {
	for i, n := range b.NTokens {
		if row < int(n) {
			return b.SeqIDs[i]
		}
		row -= int(n)
	}
	panic("row out of range")
}

func TestAppendAttendMatchesNaiveAttention(t *testing.T) {
	_, cache := open(t, "threads: 2", gqaCache)
	rng := rand.New(rand.NewSource(1))
	hist := map[int32]*history{0: {}, 1: {}}
	must(t, cache.CreateSeq(0))
	must(t, cache.CreateSeq(1))

	// A prefill of 5 and 3 tokens, then three decode steps of one token each.
	step(t, cache, rng, kvcache.Batch{
		SeqIDs: []int32{0, 1}, NTokens: []int32{5, 3}, Positions: []int32{0, 1, 2, 3, 4, 0, 1, 2},
	}, hist)
	for i := int32(0); i < 3; i++ {
		step(t, cache, rng, kvcache.Batch{
			SeqIDs: []int32{1, 0}, NTokens: []int32{1, 1}, Positions: []int32{3 + i, 5 + i},
		}, hist)
	}
	for id, want := range map[int32]int32{0: 8, 1: 6} {
		n, err := cache.Len(id, 0, 1)
		must(t, err)
		if n != want {
			t.Errorf("sequence %d holds %d tokens, want %d", id, n, want)
		}
	}
}

func TestAppendThenAttendAndView(t *testing.T) {
	_, cache := open(t, "", gqaCache)
	rng := rand.New(rand.NewSource(2))
	must(t, cache.CreateSeq(7))
	b := kvcache.Batch{SeqIDs: []int32{7}, NTokens: []int32{6}, Positions: []int32{0, 1, 2, 3, 4, 5}}
	k, v := random(rng, 6*kvHeads*headDim), random(rng, 6*kvHeads*headDim)
	must(t, cache.Append(1, b, kvcache.F32Tensor(k), kvcache.F32Tensor(v)))

	// A query at position 2 sees positions 0..2 only.
	q := random(rng, qHeads*headDim)
	out := make([]float32, len(q))
	one := kvcache.Batch{SeqIDs: []int32{7}, NTokens: []int32{1}, Positions: []int32{2}}
	must(t, cache.Attend(1, one, kvcache.F32Tensor(q), kvcache.AttentionParams{}, out))
	var h history
	for i := 0; i < 6; i++ {
		h.add(int32(i), k[i*kvHeads*headDim:(i+1)*kvHeads*headDim], v[i*kvHeads*headDim:(i+1)*kvHeads*headDim])
	}
	want := h.attend(q, 2, qHeads, kvHeads, headDim)
	for i := range want {
		if math.Abs(float64(out[i]-want[i])) > 1e-5 {
			t.Fatalf("element %d: got %g, want %g", i, out[i], want[i])
		}
	}

	// View copies the stored tokens: 6 tokens in blocks of 4, positions in order.
	segments, err := cache.View(7, 1, 0)
	must(t, err)
	var positions []int32
	for _, s := range segments {
		positions = append(positions, s.Positions...)
		if len(s.K) != len(s.Positions)*headDim*4 || len(s.V) != len(s.K) {
			t.Fatalf("segment of %d tokens has %d K and %d V bytes", len(s.Positions), len(s.K), len(s.V))
		}
	}
	if len(segments) != 2 || len(positions) != 6 || positions[5] != 5 {
		t.Fatalf("got %d segments with positions %v", len(segments), positions)
	}
}

func TestDataPathErrorsLeaveTheCacheUsable(t *testing.T) {
	_, cache := open(t, "", gqaCache)
	rng := rand.New(rand.NewSource(3))
	must(t, cache.CreateSeq(0))
	one := kvcache.Batch{SeqIDs: []int32{0}, NTokens: []int32{1}, Positions: []int32{0}}
	q := kvcache.F32Tensor(random(rng, qHeads*headDim))
	k := kvcache.F32Tensor(random(rng, kvHeads*headDim))
	v := kvcache.F32Tensor(random(rng, kvHeads*headDim))
	out := make([]float32, qHeads*headDim)

	// A slice shorter than its shape is caught before C could read past it.
	short := kvcache.F32Tensor(make([]float32, kvHeads*headDim-1))
	mustFail(t, cache.Append(0, one, short, v), kvcache.ErrInvalidArgument, "k holds 15 elements")
	// Shapes only the library knows are wrong come back with its message.
	mustFail(t, cache.AppendAttend(2, one, q, k, v, kvcache.AttentionParams{}, out),
		kvcache.ErrInvalidArgument, "layer 2 is out of range")
	unknown := kvcache.Batch{SeqIDs: []int32{9}, NTokens: []int32{1}, Positions: []int32{0}}
	mustFail(t, cache.Append(0, unknown, k, v), kvcache.ErrNotFound, "9")
	mustFail(t, cache.Append(0, one, kvcache.BF16Tensor(make([]uint16, kvHeads*headDim)), v),
		kvcache.ErrInvalidArgument, "dtype must be f32 or the storage dtype f32")

	// Past the memory limit nothing is stored.
	before, err := cache.Stats()
	must(t, err)
	huge := 1 << 14
	positions := make([]int32, huge)
	for i := range positions {
		positions[i] = int32(i)
	}
	big := kvcache.Batch{SeqIDs: []int32{0}, NTokens: []int32{int32(huge)}, Positions: positions}
	bigK := kvcache.F32Tensor(make([]float32, huge*kvHeads*headDim))
	mustFail(t, cache.Append(0, big, bigK, bigK), kvcache.ErrOutOfMemory, "limit")
	after, err := cache.Stats()
	must(t, err)
	if after.TokensStored != before.TokensStored || after.BytesUsed != before.BytesUsed {
		t.Fatalf("a failed append changed the stats: %+v -> %+v", before, after)
	}

	// The cache still works.
	must(t, cache.AppendAttend(0, one, q, k, v, kvcache.AttentionParams{}, out))
	if n, err := cache.Len(0, 0, 0); err != nil || n != 1 {
		t.Fatalf("Len = %d, %v; want 1", n, err)
	}
}
