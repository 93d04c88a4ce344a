package kvcache_test

import (
	"errors"
	"fmt"
	"log"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

// One layer, one sequence, one new token: store its K/V and attend over the cache.
func Example() {
	ctx, err := kvcache.NewContext("threads: 2")
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	cache, err := ctx.NewCacheFromYAML(`
cache: { layers: 1, kv_heads: 2, q_heads: 4, head_dim: 64, dtype: f16, memory_limit: 64MiB }
`)
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close() // before ctx.Close: deferred calls run last-in, first-out

	if err := cache.CreateSeq(0); err != nil {
		log.Fatal(err)
	}
	q := make([]float32, 4*64) // [tokens, q_heads, head_dim], filled by the engine
	k := make([]float32, 2*64) // [tokens, kv_heads, head_dim]
	v := make([]float32, 2*64)
	out := make([]float32, len(q))
	var batch kvcache.Batch
	batch.Add(0, 0) // sequence 0, one token at position 0
	err = cache.AppendAttend(0, batch, kvcache.F32Tensor(q), kvcache.F32Tensor(k), kvcache.F32Tensor(v),
		kvcache.AttentionParams{}, out)
	if err != nil {
		log.Fatal(err)
	}

	// Errors are *kvcache.Error; errors.Is tests the status code.
	err = cache.CreateSeq(0)
	fmt.Println(errors.Is(err, kvcache.ErrAlreadyExists))
	var e *kvcache.Error
	if errors.As(err, &e) {
		fmt.Println(e.Op, e.Code.Name())
	}
	// Output:
	// true
	// kvc_seq_create ALREADY_EXISTS
}
