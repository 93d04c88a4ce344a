#include "handles.hpp"
#include "kvcache/kvcache_format.h"
#include "versioned_init.hpp"

namespace {

kvc_batch read_batch(const kvc_batch* batch) {
  return kvc::read_versioned(batch, kvc_batch{}, "batch");
}

kvc_attention_params read_attention(const kvc_attention_params* params) {
  kvc_attention_params defaults{};
  kvc_attention_params_init(&defaults);
  return params ? kvc::read_versioned(params, defaults, "params") : defaults;
}

template <typename Tensor>
const Tensor& deref(const Tensor* t, const char* what) {
  kvc::require(t != nullptr, what);
  kvc::require(kvc_format_is_valid(kvc::raw_enum(t->dtype)), "a tensor's dtype is not a kvc_dtype");
  kvc::require_enum(t->device, KVC_DEVICE_HOST, KVC_DEVICE_BACKEND,
                    "a tensor's device is not a kvc_device");
  return *t;
}

}  // namespace

extern "C" {

void kvc_batch_init_sized(kvc_batch* batch, size_t struct_size, int32_t n_seqs,
                          const int32_t* seq_ids, const int32_t* n_tokens,
                          const int32_t* positions) {
  kvc_batch b{};
  b.n_seqs = n_seqs;
  b.seq_ids = seq_ids;
  b.n_tokens = n_tokens;
  b.positions = positions;
  kvc::init_versioned(batch, struct_size, b);
}

void kvc_attention_params_init_sized(kvc_attention_params* params, size_t struct_size) {
  kvc::init_versioned(params, struct_size, kvc_attention_params{});
}

kvc_status* kvc_append(kvc_cache* cache, int32_t layer, const kvc_batch* batch,
                       const kvc_tensor* k, const kvc_tensor* v) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    cache->impl->append(layer, read_batch(batch), deref(k, "k is NULL"), deref(v, "v is NULL"));
  });
}

kvc_status* kvc_attend(kvc_cache* cache, int32_t layer, const kvc_batch* batch,
                       const kvc_tensor* q, const kvc_attention_params* params,
                       kvc_tensor_mut* out) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    cache->impl->attend(layer, read_batch(batch), deref(q, "q is NULL"), read_attention(params),
                        deref(out, "out is NULL"));
  });
}

kvc_status* kvc_append_attend(kvc_cache* cache, int32_t layer, const kvc_batch* batch,
                              const kvc_tensor* q, const kvc_tensor* k, const kvc_tensor* v,
                              const kvc_attention_params* params, kvc_tensor_mut* out) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    cache->impl->append_attend(layer, read_batch(batch), deref(q, "q is NULL"),
                               deref(k, "k is NULL"), deref(v, "v is NULL"),
                               read_attention(params), deref(out, "out is NULL"));
  });
}

}  // extern "C"
