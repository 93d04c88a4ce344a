package kvcache

// #include <kvcache/kvcache.h>
import "C"

// CacheStats is kvc_cache_stats: the memory and token counters of a cache.
type CacheStats struct {
	BytesUsed     uint64 // held by stored tokens
	BytesPeak     uint64 // highest BytesUsed since creation
	BytesLimit    uint64 // the memory limit
	BytesReserved uint64 // taken from the backend, including pooled free blocks
	TokensStored  uint64 // summed over (sequence, layer, KV head)
	TokensEvicted uint64 // removed by compression, summed likewise
	BytesCopied   uint64 // moved by growth of contiguous segments
	BlocksUsed    uint64 // paged: blocks holding tokens
	BlocksFree    uint64 // paged: blocks that still fit under the limit
	Sequences     int32  // live sequences
	BytesShared   uint64 // of BytesUsed, what several sequences share (Fork, AttachPrefix)
	// Of BytesUsed, blocks that only the prefix cache holds (no live sequence), given back,
	// least recently used first, as soon as a call needs the memory.
	BytesCached        uint64
	BytesReclaimed     uint64 // bytes of cached blocks given back so far to make room
	PrefixHits         uint64 // AttachPrefix calls that attached at least one block
	PrefixTokensReused uint64 // tokens those calls attached, summed
	TokensDemoted      uint64 // moved by compression into a head's demoted tier, summed like TokensStored
}

// Stats reads the cache's counters.
func (cache *Cache) Stats() (CacheStats, error) {
	var s C.kvc_cache_stats
	C.kvc_cache_stats_init_sized(&s, C.sizeof_kvc_cache_stats)
	err := cache.shared(func() error {
		return statusError("kvc_cache_get_stats", C.kvc_cache_get_stats(cache.c, &s))
	})
	if err != nil {
		return CacheStats{}, err
	}
	return CacheStats{
		BytesUsed:          uint64(s.bytes_used),
		BytesPeak:          uint64(s.bytes_peak),
		BytesLimit:         uint64(s.bytes_limit),
		BytesReserved:      uint64(s.bytes_reserved),
		TokensStored:       uint64(s.tokens_stored),
		TokensEvicted:      uint64(s.tokens_evicted),
		BytesCopied:        uint64(s.bytes_copied),
		BlocksUsed:         uint64(s.blocks_used),
		BlocksFree:         uint64(s.blocks_free),
		Sequences:          int32(s.sequences),
		BytesShared:        uint64(s.bytes_shared),
		BytesCached:        uint64(s.bytes_cached),
		BytesReclaimed:     uint64(s.bytes_reclaimed),
		PrefixHits:         uint64(s.prefix_hits),
		PrefixTokensReused: uint64(s.prefix_tokens_reused),
		TokensDemoted:      uint64(s.tokens_demoted),
	}, nil
}
