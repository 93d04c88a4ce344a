package kvcache

// #include <stdlib.h>
// #include <kvcache/kvcache.h>
import "C"

import "unsafe"

// CreateSeq creates an empty sequence; ids are chosen by the caller and must be >= 0.
// It takes the cache exclusively.
func (cache *Cache) CreateSeq(id int32) error {
	return cache.exclusive(func() error {
		return statusError("kvc_seq_create", C.kvc_seq_create(cache.c, C.int32_t(id)))
	})
}

// RemoveSeq removes a sequence and returns its memory to the pool. It takes the cache
// exclusively.
func (cache *Cache) RemoveSeq(id int32) error {
	return cache.exclusive(func() error {
		return statusError("kvc_seq_remove", C.kvc_seq_remove(cache.c, C.int32_t(id)))
	})
}

// Fork creates sequence dst sharing every stored K/V block of src by reference count, with
// its own copy of the statistics and counters. It takes the cache exclusively.
func (cache *Cache) Fork(src, dst int32) error {
	return cache.exclusive(func() error {
		return statusError("kvc_seq_fork", C.kvc_seq_fork(cache.c, C.int32_t(src), C.int32_t(dst)))
	})
}

// Reserve ensures every (layer, KV head) of the sequence can hold tokens tokens without
// allocating; past the memory limit it fails with ErrOutOfMemory and changes nothing.
func (cache *Cache) Reserve(id, tokens int32) error {
	return cache.shared(func() error {
		return statusError("kvc_seq_reserve", C.kvc_seq_reserve(cache.c, C.int32_t(id), C.int32_t(tokens)))
	})
}

// Truncate drops every stored token at positions >= position (a speculative rollback).
func (cache *Cache) Truncate(id, position int32) error {
	return cache.shared(func() error {
		return statusError("kvc_seq_truncate", C.kvc_seq_truncate(cache.c, C.int32_t(id), C.int32_t(position)))
	})
}

// RemoveRange drops the stored tokens at positions in [first, end); the others keep their
// positions.
func (cache *Cache) RemoveRange(id, first, end int32) error {
	return cache.shared(func() error {
		return statusError("kvc_seq_remove_range",
			C.kvc_seq_remove_range(cache.c, C.int32_t(id), C.int32_t(first), C.int32_t(end)))
	})
}

// Len is the number of tokens stored for (sequence, layer, KV head).
func (cache *Cache) Len(id, layer, kvHead int32) (int32, error) {
	var n C.int32_t
	err := cache.shared(func() error {
		return statusError("kvc_seq_length",
			C.kvc_seq_length(cache.c, C.int32_t(id), C.int32_t(layer), C.int32_t(kvHead), &n))
	})
	return int32(n), err
}

// Segment is a copy of one run of stored tokens: K and V as rows of their storage formats
// (len(Positions) rows each, laid out as kvcache_format.h describes) and their absolute
// positions.
type Segment struct {
	K, V      []byte
	Positions []int32
}

// View copies the stored tokens of (sequence, layer, KV head), segment by segment in
// position order. The library's views point into its storage and are valid only until the
// next call that changes the sequence, so they are copied under the exclusive lock, which
// keeps every other call out.
func (cache *Cache) View(id, layer, kvHead int32) ([]Segment, error) {
	var segments []Segment
	err := cache.exclusive(func() error {
		var n C.size_t
		st := C.kvc_seq_view(cache.c, C.int32_t(id), C.int32_t(layer), C.int32_t(kvHead), nil, 0, &n)
		if err := statusError("kvc_seq_view", st); err != nil || n == 0 {
			return err
		}
		views := make([]C.kvc_segment_view, n)
		st = C.kvc_seq_view(cache.c, C.int32_t(id), C.int32_t(layer), C.int32_t(kvHead), &views[0], n, &n)
		if err := statusError("kvc_seq_view", st); err != nil {
			return err
		}
		kFormat, err := cache.shape.KDType.Describe()
		if err != nil {
			return err
		}
		vFormat, err := cache.shape.VDType.Describe()
		if err != nil {
			return err
		}
		kRow := C.int(kFormat.RowBytes(int(cache.shape.HeadDim)))
		vRow := C.int(vFormat.RowBytes(int(cache.shape.HeadDim)))
		segments = make([]Segment, len(views))
		for i, v := range views {
			segments[i] = Segment{
				K:         C.GoBytes(v.k, C.int(v.count)*kRow),
				V:         C.GoBytes(v.v, C.int(v.count)*vRow),
				Positions: append([]int32(nil), unsafe.Slice((*int32)(unsafe.Pointer(v.pos)), v.count)...),
			}
		}
		return nil
	})
	return segments, err
}
