package kvcache_test

import (
	"math/rand"
	"sync"
	"testing"

	"kvcache.example/kvcache"
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
