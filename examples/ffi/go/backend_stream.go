package kvcache

// #include <stdint.h>
// #include <kvcache/kvcache.h>
// static kvc_status *go_kvc_cache_set_stream(kvc_cache *cache, uintptr_t stream) {
//   return kvc_cache_set_stream(cache, (void *)stream);
// }
import "C"

// SetStream sets the backend stream that the cache orders its work on wherever a call names
// none (kvc_cache_set_stream): for the CUDA backend a cudaStream_t, passed as
// uintptr(unsafe.Pointer(stream)); 0 is the backend's default stream. The stream is C memory
// the cache keeps using until another is set or the cache is closed; the CPU backend ignores
// it. It takes the cache exclusively.
func (cache *Cache) SetStream(stream uintptr) error {
	return cache.exclusive(func() error {
		return statusError("kvc_cache_set_stream", C.go_kvc_cache_set_stream(cache.c, C.uintptr_t(stream)))
	})
}
