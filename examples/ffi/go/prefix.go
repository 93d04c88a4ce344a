package kvcache

// #include <kvcache/kvcache.h>
//
// /* A kvc_prefix holds pointers, so it is built on the C stack around the token ids, as the
//    batches of data.go are. chunk_tokens 0 keeps kvc_prefix_init's default. */
// static kvc_prefix go_kvc_prefix(const char *model, const int32_t *token_ids, int32_t n_tokens,
//                                 int32_t chunk_tokens) {
//   kvc_prefix prefix;
//   kvc_prefix_init(&prefix, model, token_ids, n_tokens);
//   if (chunk_tokens != 0) prefix.chunk_tokens = chunk_tokens;
//   return prefix;
// }
//
// static kvc_status *go_kvc_prefix_save(kvc_cache *cache, int32_t seq_id, const char *store,
//                                       const char *model, const int32_t *token_ids,
//                                       int32_t n_tokens, int32_t chunk_tokens, int32_t *saved) {
//   kvc_prefix prefix = go_kvc_prefix(model, token_ids, n_tokens, chunk_tokens);
//   return kvc_prefix_save(cache, seq_id, store, &prefix, saved);
// }
//
// static kvc_status *go_kvc_prefix_load(kvc_cache *cache, int32_t seq_id, const char *store,
//                                       const char *model, const int32_t *token_ids,
//                                       int32_t n_tokens, int32_t chunk_tokens, int32_t *restored) {
//   kvc_prefix prefix = go_kvc_prefix(model, token_ids, n_tokens, chunk_tokens);
//   return kvc_prefix_load(cache, seq_id, store, &prefix, restored);
// }
//
// static kvc_status *go_kvc_prefix_attach(kvc_cache *cache, int32_t seq_id, const char *model,
//                                         const int32_t *token_ids, int32_t n_tokens,
//                                         int32_t *attached) {
//   kvc_prefix prefix = go_kvc_prefix(model, token_ids, n_tokens, 0);
//   return kvc_prefix_attach(cache, seq_id, &prefix, attached);
// }
//
// static kvc_status *go_kvc_prefix_publish(kvc_cache *cache, int32_t seq_id, const char *model,
//                                          const int32_t *token_ids, int32_t n_tokens,
//                                          int32_t *published) {
//   kvc_prefix prefix = go_kvc_prefix(model, token_ids, n_tokens, 0);
//   return kvc_prefix_publish(cache, seq_id, &prefix, published);
// }
//
// static kvc_status *go_kvc_prefix_lookup(kvc_cache *cache, const char *model,
//                                         const int32_t *token_ids, int32_t n_tokens,
//                                         int32_t *tokens) {
//   kvc_prefix prefix = go_kvc_prefix(model, token_ids, n_tokens, 0);
//   return kvc_prefix_lookup(cache, &prefix, tokens);
// }
import "C"

import (
	"context"
	"fmt"
	"math"
)

// Prefix is a prompt prefix whose K/V is shared through a store in chunks of ChunkTokens
// tokens, each keyed by the model, the cache's shape and every token id up to the chunk's
// end, so that any cache of the same shape, in any process, finds the chunks it shares
// (SavePrefix, LoadPrefix); and the prompt whose blocks a cache with CacheParams.PrefixCache
// publishes and attaches (PublishPrefix, AttachPrefix, LookupPrefix), whose unit is the
// cache's block: they ignore ChunkTokens.
type Prefix struct {
	// Model identifies the weights (e.g. a hash of the model file), not empty: K/V of one
	// model must never be restored into another.
	Model string
	// TokenIDs are the prefix's token ids, position 0 first.
	TokenIDs []int32
	// ChunkTokens is the tokens per chunk, 1..65536; 0 means kvc_prefix_init's default, 256.
	// Only whole chunks are saved or restored.
	ChunkTokens int32
}

// SavePrefix saves the K/V of the whole chunks of p that sequence id holds to store,
// skipping chunks already there, and returns the tokens those chunks cover. Every (layer,
// KV head) must hold positions 0, 1, ... up to the last saved token (ErrUnsupported
// otherwise, before anything is written): save right after the prefix's prefill.
func (cache *Cache) SavePrefix(id int32, store string, p Prefix) (int32, error) {
	return cache.SavePrefixCtx(context.Background(), id, store, p)
}

// SavePrefixCtx is SavePrefix unless ctx is done before the save starts (ctx.Err() is then
// returned); a save that has started runs to its end.
func (cache *Cache) SavePrefixCtx(ctx context.Context, id int32, store string, p Prefix) (int32, error) {
	var saved C.int32_t
	err := cache.sharedCtx(ctx, func() error {
		return p.call("kvc_prefix_save", func(m *cmem, model *C.char, tokens *C.int32_t, n C.int32_t) *C.kvc_status {
			return C.go_kvc_prefix_save(cache.c, C.int32_t(id), m.str(store), model, tokens, n, C.int32_t(p.ChunkTokens), &saved)
		})
	})
	return int32(saved), err
}

// LoadPrefix creates sequence id holding the longest run of p's chunks found in store, from
// chunk 0 on, and returns the tokens restored (a multiple of the chunk size, possibly 0: the
// sequence is then empty); the engine prefills the rest from there. A missing chunk ends the
// run; on any other error nothing is created. It takes the cache exclusively.
func (cache *Cache) LoadPrefix(id int32, store string, p Prefix) (int32, error) {
	return cache.LoadPrefixCtx(context.Background(), id, store, p)
}

// LoadPrefixCtx is LoadPrefix unless ctx is done before the load starts (ctx.Err() is then
// returned); a load that has started runs to its end.
func (cache *Cache) LoadPrefixCtx(ctx context.Context, id int32, store string, p Prefix) (int32, error) {
	var restored C.int32_t
	err := cache.exclusiveCtx(ctx, func() error {
		return p.call("kvc_prefix_load", func(m *cmem, model *C.char, tokens *C.int32_t, n C.int32_t) *C.kvc_status {
			return C.go_kvc_prefix_load(cache.c, C.int32_t(id), m.str(store), model, tokens, n, C.int32_t(p.ChunkTokens), &restored)
		})
	})
	return int32(restored), err
}

// PublishPrefix makes the full blocks of sequence id that hold the first tokens of p (the
// token ids of positions 0, 1, ...) findable by AttachPrefix, and returns the tokens they
// cover: the whole blocks that every (layer, KV head) holds in order from position 0. With
// CacheParams.PrefixWriteThrough it also writes them to the PrefixStore. ErrUnsupported for a
// cache without PrefixCache.
func (cache *Cache) PublishPrefix(id int32, p Prefix) (int32, error) {
	return cache.PublishPrefixCtx(context.Background(), id, p)
}

// PublishPrefixCtx is PublishPrefix unless ctx is done before the call starts (ctx.Err() is
// then returned); a call that has started, its store writes included, runs to its end.
func (cache *Cache) PublishPrefixCtx(ctx context.Context, id int32, p Prefix) (int32, error) {
	var published C.int32_t
	err := cache.sharedCtx(ctx, func() error {
		return p.call("kvc_prefix_publish", func(_ *cmem, model *C.char, tokens *C.int32_t, n C.int32_t) *C.kvc_status {
			return C.go_kvc_prefix_publish(cache.c, C.int32_t(id), model, tokens, n, &published)
		})
	})
	return int32(published), err
}

// AttachPrefix creates sequence id (ErrAlreadyExists when it exists) sharing the longest run
// of published full blocks of p on every (layer, KV head), continued in the cache's
// PrefixStore if it has one, and returns the tokens attached (a multiple of BlockTokens,
// possibly 0: the sequence is then empty); the engine prefills the rest from there.
// ErrUnsupported for a cache without PrefixCache. It takes the cache exclusively.
func (cache *Cache) AttachPrefix(id int32, p Prefix) (int32, error) {
	return cache.AttachPrefixCtx(context.Background(), id, p)
}

// AttachPrefixCtx is AttachPrefix unless ctx is done before the call starts (ctx.Err() is
// then returned); a call that has started, its store reads included, runs to its end.
func (cache *Cache) AttachPrefixCtx(ctx context.Context, id int32, p Prefix) (int32, error) {
	var attached C.int32_t
	err := cache.exclusiveCtx(ctx, func() error {
		return p.call("kvc_prefix_attach", func(_ *cmem, model *C.char, tokens *C.int32_t, n C.int32_t) *C.kvc_status {
			return C.go_kvc_prefix_attach(cache.c, C.int32_t(id), model, tokens, n, &attached)
		})
	})
	return int32(attached), err
}

// LookupPrefix returns the tokens AttachPrefix would attach from the cache itself now (the
// store is not asked); it changes nothing but the blocks' recency.
func (cache *Cache) LookupPrefix(p Prefix) (int32, error) {
	var found C.int32_t
	err := cache.shared(func() error {
		return p.call("kvc_prefix_lookup", func(_ *cmem, model *C.char, tokens *C.int32_t, n C.int32_t) *C.kvc_status {
			return C.go_kvc_prefix_lookup(cache.c, model, tokens, n, &found)
		})
	})
	return int32(found), err
}

// call runs the C function op through call with p's model as a C string and p's token ids as
// a pointer into the slice, read during the call only; call allocates its other strings in m.
func (p Prefix) call(op string, call func(m *cmem, model *C.char, tokens *C.int32_t, n C.int32_t) *C.kvc_status) error {
	if len(p.TokenIDs) > math.MaxInt32 {
		return invalid(op, fmt.Sprintf("the prefix holds %d token ids; at most %d fit an int32_t", len(p.TokenIDs), math.MaxInt32))
	}
	var m cmem
	defer m.free()
	var tokens *C.int32_t
	if len(p.TokenIDs) > 0 {
		tokens = (*C.int32_t)(&p.TokenIDs[0])
	}
	return statusError(op, call(&m, m.str(p.Model), tokens, C.int32_t(len(p.TokenIDs))))
}
