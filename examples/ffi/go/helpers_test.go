package kvcache_test

import (
	"errors"
	"math/rand"
	"strings"
	"testing"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

// open creates a context from YAML and a cache from cacheYAML, both closed when the test ends.
func open(t *testing.T, contextYAML, cacheYAML string) (*kvcache.Context, *kvcache.Cache) {
	t.Helper()
	ctx, err := kvcache.NewContext(contextYAML)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ctx.Close(); err != nil {
			t.Error(err)
		}
	})
	cache, err := ctx.NewCacheFromYAML(cacheYAML)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	return ctx, cache
}

// mustFail checks that err is an *Error with the given code (through errors.Is) and a
// message containing want.
func mustFail(t *testing.T, err error, code kvcache.Code, want string) {
	t.Helper()
	var e *kvcache.Error
	switch {
	case err == nil:
		t.Fatalf("the call succeeded; want %s", code.Name())
	case !errors.Is(err, code):
		t.Fatalf("got %v; want %s", err, code.Name())
	case !errors.As(err, &e) || !strings.Contains(e.Message, want):
		t.Fatalf("got %v; want a message containing %q", err, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func random(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = rng.Float32()*2 - 1
	}
	return s
}
