// The input as a sequence image (docs/sequence_format.md) for kvc_seq_import into small
// caches of one shape (2 layers, 2 KV heads, 4 query heads, head_dim 8) with different
// storage: f32 paged, f16 contiguous, bf16 paged under h2o (which needs attn_sum), f32 paged
// under h2o demoting into f16 (which takes images with demoted tiers of f16 rows). A refused
// image must change nothing; an imported one must be viewable, attendable, and export bytes
// that import into an equal sequence. Each input is imported as it is and, so that mutations
// get past the checksum, with its last four bytes replaced by the CRC-32 of the rest.
#include <boost/crc.hpp>
#include <vector>

#include "fuzz_support.hpp"

namespace {

constexpr int32_t kLayers = 2, kKvHeads = 2, kQHeads = 4, kHeadDim = 8;

struct Storage {
  kvc_dtype dtype;
  kvc_layout layout;
  const char* policy;
  int32_t demote = -1;  // the format K and V are demoted into, -1: none
};
constexpr Storage kStorages[] = {{KVC_DTYPE_F32, KVC_LAYOUT_PAGED, nullptr},
                                 {KVC_DTYPE_F16, KVC_LAYOUT_CONTIGUOUS, nullptr},
                                 {KVC_DTYPE_BF16, KVC_LAYOUT_PAGED, "h2o"},
                                 {KVC_DTYPE_F32, KVC_LAYOUT_PAGED, "h2o", KVC_DTYPE_F16}};

kvc_cache* make_cache(const Storage& storage) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kLayers;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kHeadDim;
  p.dtype = storage.dtype;
  p.layout = storage.layout;
  p.block_tokens = 4;
  p.memory_limit = 256 * 1024;
  p.policy = storage.policy;
  if (storage.policy != nullptr) p.budget = 8;
  p.demote_k_dtype = p.demote_v_dtype = storage.demote;
  kvc_cache* cache = nullptr;
  kvf::require_ok(kvc_cache_create(kvf::shared_context(), &p, &cache), "kvc_cache_create");
  return cache;
}

// Views every (layer, KV head) and attends one query per layer after the last position. A
// head with a demoted tier has no view (its storage order is not position order): the query
// then comes at the largest position, after every stored one.
void view_and_attend(kvc_cache* cache, int32_t seq, bool demotes) {
  int32_t last = -1;
  bool unviewed = false;
  for (int32_t l = 0; l < kLayers; ++l) {
    for (int32_t h = 0; h < kKvHeads; ++h) {
      size_t count = 0;
      kvc_status* viewed = kvc_seq_view(cache, seq, l, h, nullptr, 0, &count);
      if (demotes && viewed != nullptr && kvc_status_get_code(viewed) == KVC_ERR_UNSUPPORTED) {
        kvc_status_free(viewed);
        unviewed = true;
        continue;
      }
      kvf::require_ok(viewed, "kvc_seq_view");
      std::vector<kvc_segment_view> views(count);
      size_t again = 0;
      kvf::require_ok(kvc_seq_view(cache, seq, l, h, views.data(), views.size(), &again),
                      "kvc_seq_view");
      kvf::check(again == count, "kvc_seq_view counts differ");
      int32_t n = 0, previous = -1;
      for (const kvc_segment_view& view : views) {
        for (int32_t t = 0; t < view.count; ++t) {
          kvf::check(view.pos[t] > previous, "stored positions not increasing");
          previous = view.pos[t];
        }
        n += view.count;
      }
      int32_t length = -1;
      kvf::require_ok(kvc_seq_length(cache, seq, l, h, &length), "kvc_seq_length");
      kvf::check(n == length, "views hold other than kvc_seq_length tokens");
      if (previous > last) last = previous;
    }
  }
  if (last == INT32_MAX && !unviewed) return;  // no position after it to attend from
  const int32_t position = unviewed ? INT32_MAX : last + 1, one = 1;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &one, &position);
  std::vector<float> q(kQHeads * kHeadDim, 0.5f), out(q.size());
  kvc_tensor qt{q.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  kvc_tensor_mut ot{out.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  for (int32_t l = 0; l < kLayers; ++l) {
    kvf::require_ok(kvc_attend(cache, l, &batch, &qt, nullptr, &ot), "kvc_attend");
  }
}

void import_into(const Storage& storage, const uint8_t* data, size_t size) {
  kvc_cache* cache = make_cache(storage);
  const kvc_cache_stats before = kvf::stats_of(cache);
  if (!kvf::ok(kvc_seq_import(cache, 0, data, size))) {
    kvf::check(kvf::same_stats(before, kvf::stats_of(cache)), "a refused import changed stats");
    kvf::check(kvf::lengths_of(cache, 0, kLayers, kKvHeads).empty(),
               "a refused import created the sequence");
    kvc_cache_destroy(cache);
    return;
  }
  kvf::check(kvf::stats_of(cache).sequences == 1, "an import made other than one sequence");
  view_and_attend(cache, 0, storage.demote != -1);
  const std::vector<uint8_t> exported = kvf::export_of(cache, 0);
  kvf::check(!exported.empty(), "an imported sequence does not export");
  // Twice the tokens may not fit the limit; anything else must import.
  kvc_status* status = kvc_seq_import(cache, 1, exported.data(), exported.size());
  if (status != nullptr && kvc_status_get_code(status) != KVC_ERR_OUT_OF_MEMORY) {
    kvf::require_ok(status, "re-importing an export");
  }
  if (kvf::ok(status)) {
    kvf::check(kvf::export_of(cache, 1) == exported, "a re-imported export exports other bytes");
    kvf::check(kvf::lengths_of(cache, 1, kLayers, kKvHeads) ==
                   kvf::lengths_of(cache, 0, kLayers, kKvHeads),
               "a re-imported export holds other lengths");
    kvf::require_ok(kvc_seq_remove(cache, 1), "kvc_seq_remove");
  }
  kvf::require_ok(kvc_seq_remove(cache, 0), "kvc_seq_remove");
  const kvc_cache_stats after = kvf::stats_of(cache);
  kvf::check(after.bytes_used == 0 && after.tokens_stored == 0 && after.sequences == 0,
             "an emptied cache still holds bytes or tokens");
  kvc_cache_destroy(cache);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const Storage& storage : kStorages) import_into(storage, data, size);
  if (size < 4) return 0;
  std::vector<uint8_t> checked(data, data + size);
  boost::crc_32_type crc;
  crc.process_bytes(checked.data(), size - 4);
  const uint32_t sum = crc.checksum();
  for (int i = 0; i < 4; ++i) checked[size - 4 + i] = static_cast<uint8_t>(sum >> (8 * i));
  if (checked != std::vector<uint8_t>(data, data + size)) {
    for (const Storage& storage : kStorages) import_into(storage, checked.data(), size);
  }
  return 0;
}
