package kvcache_test

import (
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

func TestVersion(t *testing.T) {
	if kvcache.Version() != kvcache.HeaderVersion {
		t.Fatalf("runtime %d (%s), header %d", kvcache.Version(), kvcache.VersionString(), kvcache.HeaderVersion)
	}
}

func TestContextFromYAMLAndItsPlugins(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvcache.yaml")
	must(t, os.WriteFile(path, []byte("threads: 2\n"), 0o644))
	ctx, err := kvcache.NewContextFromFile(path)
	must(t, err)
	defer ctx.Close()

	plugins, err := ctx.Plugins()
	must(t, err)
	found := map[string]kvcache.PluginKind{}
	for _, p := range plugins {
		found[p.Name] = p.Kind
		if p.Path == "" {
			t.Errorf("plugin %s has no path", p.Name)
		}
	}
	if found["cpu"] != kvcache.PluginBackend || found["streaming"] != kvcache.PluginPolicy {
		t.Fatalf("plugins: %+v", plugins)
	}
	// Loading a library twice registers its names twice.
	for _, p := range plugins {
		if p.Name == "streaming" {
			mustFail(t, ctx.LoadPlugin(p.Path), kvcache.ErrAlreadyExists, "streaming")
		}
	}
	mustFail(t, ctx.LoadPlugin("/nonexistent/libnothing.so"), kvcache.ErrPlugin, "/nonexistent/libnothing.so")
}

func TestContextErrors(t *testing.T) {
	_, err := kvcache.NewContext("threads: -1\n")
	mustFail(t, err, kvcache.ErrConfig, "threads")
	_, err = kvcache.NewContext("cache: [\n")
	mustFail(t, err, kvcache.ErrConfig, "")
	_, err = kvcache.NewContextFromFile("/nonexistent/kvcache.yaml")
	mustFail(t, err, kvcache.ErrNotFound, "/nonexistent/kvcache.yaml")
}

func TestCloseOrderAndClosedHandles(t *testing.T) {
	ctx, err := kvcache.NewContext("")
	must(t, err)
	cache, err := ctx.NewCacheFromYAML(gqaCache)
	must(t, err)

	mustFail(t, ctx.Close(), kvcache.ErrInvalidArgument, "1 cache(s) made from the context are still open")
	must(t, cache.Close())
	must(t, cache.Close()) // twice is fine
	if err := cache.CreateSeq(0); !errors.Is(err, kvcache.ErrClosed) {
		t.Fatalf("CreateSeq on a closed cache: %v", err)
	}
	must(t, ctx.Close())
	if _, err := ctx.NewCacheFromYAML(gqaCache); !errors.Is(err, kvcache.ErrClosed) {
		t.Fatalf("NewCacheFromYAML on a closed context: %v", err)
	}
}

// A contiguous segment reserved up to the limit and then truncated cannot move into a
// smaller one, which the library logs at debug level.
func TestLoggerReceivesTheLibrarysMessages(t *testing.T) {
	ctx, err := kvcache.NewContext("")
	must(t, err)
	defer ctx.Close()
	var mu sync.Mutex
	var messages []string
	must(t, ctx.SetLogger(func(level kvcache.LogLevel, message string) {
		mu.Lock()
		defer mu.Unlock()
		messages = append(messages, level.String()+": "+message)
	}, kvcache.LogDebug))

	const tokenBytes = 2*8*4 + 4 // K and V of 8 f32 values, and a position
	p := kvcache.DefaultCacheParams()
	p.HeadDim, p.DType, p.Layout, p.MemoryLimit = 8, kvcache.F32, kvcache.Contiguous, 100*tokenBytes+16
	cache, err := ctx.NewCache(p)
	must(t, err)
	must(t, cache.CreateSeq(0))
	must(t, cache.Reserve(0, 100))
	rng := rand.New(rand.NewSource(8))
	b := kvcache.Batch{SeqIDs: []int32{0}, NTokens: []int32{100}, Positions: make([]int32, 100)}
	for i := range b.Positions {
		b.Positions[i] = int32(i)
	}
	must(t, cache.Append(0, b, kvcache.F32Tensor(random(rng, 800)), kvcache.F32Tensor(random(rng, 800))))
	must(t, cache.Truncate(0, 2))
	must(t, cache.Close())
	must(t, ctx.SetLogger(nil, kvcache.LogWarn))

	mu.Lock()
	defer mu.Unlock()
	for _, m := range messages {
		if strings.HasPrefix(m, "debug: keeping unused capacity") {
			return
		}
	}
	t.Fatalf("no debug message about unused capacity; got %q", messages)
}
