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
	BytesShared   uint64 // of BytesUsed, what forked sequences share
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
		BytesUsed:     uint64(s.bytes_used),
		BytesPeak:     uint64(s.bytes_peak),
		BytesLimit:    uint64(s.bytes_limit),
		BytesReserved: uint64(s.bytes_reserved),
		TokensStored:  uint64(s.tokens_stored),
		TokensEvicted: uint64(s.tokens_evicted),
		BytesCopied:   uint64(s.bytes_copied),
		BlocksUsed:    uint64(s.blocks_used),
		BlocksFree:    uint64(s.blocks_free),
		Sequences:     int32(s.sequences),
		BytesShared:   uint64(s.bytes_shared),
	}, nil
}
