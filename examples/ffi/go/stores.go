package kvcache

// #include <kvcache/kvcache.h>
import "C"

import "context"

// Stores keep byte values under string keys outside the cache: in this process (plugin
// host), in a folder (disk) or in Redis. They are configured in the context's YAML, each under
// the name the calls below take:
//
//	stores:
//	  mem: { plugin: host, params: { capacity: 64MiB } }
//
// Store errors keep their code and name the store: ErrNotFound for a key without a value or an
// unknown store, ErrIO when it cannot be reached or a value fails its checksum, ErrOutOfMemory
// when it is full.

// Offload writes the sequence's Export image to store under key, replacing any value there,
// then removes the sequence. On any error the sequence is left as it was. It takes the cache
// exclusively.
func (cache *Cache) Offload(id int32, store, key string) error {
	return cache.OffloadCtx(context.Background(), id, store, key)
}

// OffloadCtx is Offload unless ctx is done before the write starts (ctx.Err() is then
// returned and the sequence is left as it was); a write that has started runs to its end.
func (cache *Cache) OffloadCtx(ctx context.Context, id int32, store, key string) error {
	var m cmem
	defer m.free()
	return cache.exclusiveCtx(ctx, func() error {
		return statusError("kvc_seq_offload", C.kvc_seq_offload(cache.c, C.int32_t(id), m.str(store), m.str(key)))
	})
}

// Restore creates sequence id from the value under key in store, as Import does; on any error
// no sequence is created. The value stays in the store (Context.StoreDrop removes it). It
// takes the cache exclusively.
func (cache *Cache) Restore(id int32, store, key string) error {
	return cache.RestoreCtx(context.Background(), id, store, key)
}

// RestoreCtx is Restore unless ctx is done before the read starts (ctx.Err() is then
// returned); a read that has started runs to its end.
func (cache *Cache) RestoreCtx(ctx context.Context, id int32, store, key string) error {
	var m cmem
	defer m.free()
	return cache.exclusiveCtx(ctx, func() error {
		return statusError("kvc_seq_restore", C.kvc_seq_restore(cache.c, C.int32_t(id), m.str(store), m.str(key)))
	})
}

// StoreDrop deletes the value under key in store; ErrNotFound when there is none.
func (ctx *Context) StoreDrop(store, key string) error {
	ctx.mu.RLock()
	defer ctx.mu.RUnlock()
	if ctx.c == nil {
		return ErrClosed
	}
	var m cmem
	defer m.free()
	return statusError("kvc_store_drop", C.kvc_store_drop(ctx.c, m.str(store), m.str(key)))
}
