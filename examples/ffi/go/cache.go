package kvcache

// #include <stdlib.h>
// #include <kvcache/kvcache.h>
import "C"

import (
	"context"
	"log"
	"runtime"
	"sync"
)

// Cache is one model shape's K/V store with its memory limit and backend.
//
// Every call may run concurrently from any goroutines, on the same sequences or on others:
// the library serialises calls on one sequence (kvcache.h, "Thread safety"). Calls that
// create, remove, fork, import, offload or restore sequences, View (which copies storage),
// and Close take the cache exclusively (a sync.RWMutex does that, so they simply wait).
type Cache struct {
	mu    sync.RWMutex // shared by calls on sequences, exclusive for structural calls
	c     *C.kvc_cache
	ctx   *Context // kept reachable: the context must outlive the cache
	shape CacheParams
}

// NewCache creates a cache with the given parameters.
func (ctx *Context) NewCache(p CacheParams) (*Cache, error) {
	var m cmem
	defer m.free()
	params := p.toC(&m)
	return ctx.newCache("kvc_cache_create", func(out **C.kvc_cache) *C.kvc_status {
		return C.kvc_cache_create(ctx.c, &params, out)
	})
}

// NewCacheFromYAML creates a cache from YAML holding `cache:` and optionally `backend:` and
// `policy:` sections; "" uses the context's own configuration.
func (ctx *Context) NewCacheFromYAML(yaml string) (*Cache, error) {
	var m cmem
	defer m.free()
	text := m.optional(yaml)
	return ctx.newCache("kvc_cache_create_from_yaml", func(out **C.kvc_cache) *C.kvc_status {
		return C.kvc_cache_create_from_yaml(ctx.c, text, out)
	})
}

func (ctx *Context) newCache(op string, create func(**C.kvc_cache) *C.kvc_status) (*Cache, error) {
	ctx.mu.RLock()
	defer ctx.mu.RUnlock()
	if ctx.c == nil {
		return nil, ErrClosed
	}
	var c *C.kvc_cache
	if err := statusError(op, create(&c)); err != nil {
		return nil, err
	}
	cache := &Cache{c: c, ctx: ctx}
	shape, err := cache.Shape()
	if err != nil {
		C.kvc_cache_destroy(c)
		return nil, err
	}
	cache.shape = shape
	ctx.caches.Add(1)
	runtime.SetFinalizer(cache, func(cache *Cache) {
		log.Print("kvcache: a Cache was not closed; closing it in its finalizer")
		cache.Close()
	})
	return cache, nil
}

// Close destroys the cache and frees its memory. It waits for calls in progress. Closing a
// closed cache does nothing.
func (cache *Cache) Close() error {
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if cache.c == nil {
		return nil
	}
	C.kvc_cache_destroy(cache.c)
	cache.c = nil
	cache.ctx.caches.Add(-1)
	runtime.SetFinalizer(cache, nil)
	return nil
}

// Shape reads back the shape the cache was created with, defaults filled in (Layers
// through MemoryLimit). The policy fields are not the cache's policy: see PolicyInfo.
func (cache *Cache) Shape() (CacheParams, error) {
	var p C.kvc_cache_params
	C.kvc_cache_params_init_sized(&p, C.sizeof_kvc_cache_params)
	err := cache.shared(func() error {
		return statusError("kvc_cache_get_params", C.kvc_cache_get_params(cache.c, &p))
	})
	if err != nil {
		return CacheParams{}, err
	}
	return paramsFromC(&p), nil
}

// shared runs call under the shared lock, after checking the cache is open.
func (cache *Cache) shared(call func() error) error {
	cache.mu.RLock()
	defer cache.mu.RUnlock()
	if cache.c == nil {
		return ErrClosed
	}
	return call()
}

// exclusive runs call under the exclusive lock, after checking the cache is open.
func (cache *Cache) exclusive(call func() error) error {
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if cache.c == nil {
		return ErrClosed
	}
	return call()
}

// sharedCtx is shared with ctx checked before waiting for the lock and again once it is held,
// since an exclusive call may hold it long. A C call that has begun runs to its end.
func (cache *Cache) sharedCtx(ctx context.Context, call func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return cache.shared(func() error { return unlessDone(ctx, call) })
}

// exclusiveCtx is exclusive with ctx checked as sharedCtx checks it.
func (cache *Cache) exclusiveCtx(ctx context.Context, call func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return cache.exclusive(func() error { return unlessDone(ctx, call) })
}

// unlessDone runs call unless ctx is done, whose error it then returns.
func unlessDone(ctx context.Context, call func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return call()
}
