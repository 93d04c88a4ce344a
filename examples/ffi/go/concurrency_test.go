package kvcache_test

import (
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

// Data calls on disjoint sequences run concurrently; structural calls on other sequences
// interleave with them (the Cache's lock makes those wait).
func TestConcurrentCallsOnDisjointSequences(t *testing.T) {
	_, cache := open(t, "threads: 2", gqaCache)
	const workers, steps = 4, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	for w := int32(0); w < workers; w++ {
		must(t, cache.CreateSeq(w))
		wg.Add(1)
		go func(id int32) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(id)))
			out := make([]float32, qHeads*headDim)
			for pos := int32(0); pos < steps; pos++ {
				b := kvcache.Batch{SeqIDs: []int32{id}, NTokens: []int32{1}, Positions: []int32{pos}}
				q := kvcache.F32Tensor(random(rng, qHeads*headDim))
				k := kvcache.F32Tensor(random(rng, kvHeads*headDim))
				if err := cache.AppendAttend(0, b, q, k, k, kvcache.AttentionParams{}, out); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < steps; i++ {
			if err := cache.CreateSeq(100); err != nil {
				errs <- err
				return
			}
			if err := cache.RemoveSeq(100); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := int32(0); w < workers; w++ {
		if n, err := cache.Len(w, 0, 0); err != nil || n != steps {
			t.Fatalf("sequence %d holds %d tokens (%v), want %d", w, n, err, steps)
		}
	}
}

// Calls on the same sequence from many goroutines at once (issue 32's probe): one decodes,
// one removes older ranges, one compresses, exports and imports, one forks and views. The
// library serialises them: every call succeeds, and every export holds increasing positions.
func TestConcurrentCallsOnTheSameSequence(t *testing.T) {
	_, cache := open(t, "threads: 2", gqaCache+"policy: { name: h2o, budget: 12 }\n")
	must(t, cache.CreateSeq(0))
	const steps = 120
	var newest atomic.Int32
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	wg.Add(4)
	go func() { // the engine
		defer wg.Done()
		defer done.Store(true)
		rng := rand.New(rand.NewSource(1))
		out := make([]float32, qHeads*headDim)
		for pos := int32(0); pos < steps; pos++ {
			b := kvcache.Batch{SeqIDs: []int32{0}, NTokens: []int32{1}, Positions: []int32{pos}}
			q := kvcache.F32Tensor(random(rng, qHeads*headDim))
			k := kvcache.F32Tensor(random(rng, kvHeads*headDim))
			for layer := int32(0); layer < 2; layer++ {
				if err := cache.AppendAttend(layer, b, q, k, k, kvcache.AttentionParams{}, out); err != nil {
					fail(err)
					return
				}
			}
			newest.Store(pos)
		}
	}()
	go func() { // drops older ranges
		defer wg.Done()
		for i := int32(0); !done.Load(); i++ {
			if end := newest.Load() - 6; end > 4 {
				if err := cache.RemoveRange(0, end-2-i%3, end); err != nil {
					fail(err)
					return
				}
			}
			runtime.Gosched()
		}
	}()
	go func() { // compresses, exports, imports the export
		defer wg.Done()
		for i := int32(0); !done.Load(); i++ {
			if err := cache.Compress(-1, 0); err != nil {
				fail(err)
				return
			}
			data, err := cache.Export(0)
			if err != nil {
				fail(err)
				return
			}
			if err := cache.Import(1000000+i, data); err != nil {
				fail(err)
				return
			}
			if err := cache.RemoveSeq(1000000 + i); err != nil {
				fail(err)
				return
			}
		}
	}()
	go func() { // forks and views the fork
		defer wg.Done()
		for i := int32(0); !done.Load(); i++ {
			if err := cache.Fork(0, 2000000+i); err != nil {
				fail(err)
				return
			}
			segments, err := cache.View(0, 1, 1)
			if err != nil {
				fail(err)
				return
			}
			last := int32(-1)
			for _, s := range segments {
				for _, p := range s.Positions {
					if p <= last {
						fail(fmt.Errorf("a view holds position %d after %d", p, last))
						return
					}
					last = p
				}
			}
			if err := cache.RemoveSeq(2000000 + i); err != nil {
				fail(err)
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for layer := int32(0); layer < 2; layer++ {
		segments, err := cache.View(0, layer, 0)
		must(t, err)
		last := int32(-1)
		for _, s := range segments {
			for _, p := range s.Positions {
				if p <= last || p >= steps {
					t.Fatalf("layer %d: position %d after %d", layer, p, last)
				}
				last = p
			}
		}
		if last < 0 {
			t.Fatalf("layer %d: the sequence holds nothing", layer)
		}
	}
}

// A logger that panics does not take the process down: the panic stays on the Go side (the
// library logs at debug level when a truncated contiguous segment cannot move into a smaller
// one, as in TestLoggerReceivesTheLibrarysMessages).
func TestAPanickingLoggerIsRecovered(t *testing.T) {
	ctx, err := kvcache.NewContext("")
	must(t, err)
	defer ctx.Close()
	var calls atomic.Int32
	must(t, ctx.SetLogger(func(kvcache.LogLevel, string) {
		calls.Add(1)
		panic("logger failure")
	}, kvcache.LogDebug))
	const tokenBytes = 2*8*4 + 4
	p := kvcache.DefaultCacheParams()
	p.HeadDim, p.DType, p.Layout, p.MemoryLimit = 8, kvcache.F32, kvcache.Contiguous, 100*tokenBytes+16
	cache, err := ctx.NewCache(p)
	must(t, err)
	defer cache.Close()
	must(t, cache.CreateSeq(0))
	must(t, cache.Reserve(0, 100))
	rng := rand.New(rand.NewSource(8))
	b := kvcache.Batch{SeqIDs: []int32{0}, NTokens: []int32{100}, Positions: make([]int32, 100)}
	for i := range b.Positions {
		b.Positions[i] = int32(i)
	}
	must(t, cache.Append(0, b, kvcache.F32Tensor(random(rng, 800)), kvcache.F32Tensor(random(rng, 800))))
	must(t, cache.Truncate(0, 2))
	if calls.Load() == 0 {
		t.Fatal("the logger was never called")
	}
	if n, err := cache.Len(0, 0, 0); err != nil || n != 2 {
		t.Fatalf("length %d (%v) after the truncation, want 2", n, err)
	}
}
