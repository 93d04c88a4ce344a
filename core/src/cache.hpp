// A kvc_cache: sequences of per-(layer, KV head) stores in a memory-limited pool, with the
// batched data path (append, attend) running on a backend plugin.
#pragma once

#include <atomic>
#include <memory>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "backend.hpp"
#include "block_pool.hpp"
#include "config.hpp"
#include "context.hpp"
#include "head_store.hpp"

namespace kvc {

struct Sequence {
  std::vector<HeadStore> heads;  // [layer * kv_heads + kv_head]
};

class Cache {
 public:
  Cache(Context& context, const CacheConfig& config);
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  const CacheConfig& config() const { return config_; }

  void create_sequence(int32_t seq_id);
  void remove_sequence(int32_t seq_id);
  void reserve(int32_t seq_id, int32_t tokens);
  int32_t length(int32_t seq_id, int32_t layer, int32_t kv_head) const;

  void append(int32_t layer, const kvc_batch& batch, const kvc_tensor& k, const kvc_tensor& v);
  void attend(int32_t layer, const kvc_batch& batch, const kvc_tensor& q,
              const kvc_attention_params& params, const kvc_tensor_mut& out);
  void append_attend(int32_t layer, const kvc_batch& batch, const kvc_tensor& q,
                     const kvc_tensor& k, const kvc_tensor& v, const kvc_attention_params& params,
                     const kvc_tensor_mut& out);

  kvc_cache_stats stats() const;

 private:
  // The sequences of a batch, resolved and checked, in batch order.
  struct ResolvedBatch {
    std::vector<Sequence*> sequences;
    std::vector<int32_t> offsets;  // first token row of each sequence
    int32_t total_tokens = 0;
  };

  ResolvedBatch resolve(int32_t layer, const kvc_batch& batch) const;
  void check_input(const kvc_tensor& t, int32_t heads, const char* what) const;
  void check_kv_inputs(const kvc_tensor& k, const kvc_tensor& v) const;
  void append_locked(int32_t layer, const kvc_batch& batch, const ResolvedBatch& resolved,
                     const kvc_tensor& k, const kvc_tensor& v);
  void attend_locked(int32_t layer, const kvc_batch& batch, const ResolvedBatch& resolved,
                     const kvc_tensor& q, const kvc_attention_params& params,
                     const kvc_tensor_mut& out);
  // Makes room for n_tokens[i] more tokens in each listed store, all or nothing.
  void ensure_room(const std::vector<HeadStore*>& stores, const std::vector<int32_t>& extra,
                   bool exact);
  HeadStore& store(Sequence& seq, int32_t layer, int32_t kv_head) const {
    return seq.heads[static_cast<size_t>(layer) * config_.kv_heads + kv_head];
  }
  Sequence& find(int32_t seq_id) const;

  Context& context_;
  CacheConfig config_;
  Geometry geometry_;
  Backend backend_;
  BlockPool pool_;
  mutable std::shared_mutex sequences_mutex_;
  std::unordered_map<int32_t, std::unique_ptr<Sequence>> sequences_;
  std::atomic<uint64_t> tokens_stored_{0};
  std::atomic<uint64_t> tokens_evicted_{0};
  std::atomic<uint64_t> bytes_copied_{0};
};

// Checks a cache configuration's values; throws kvc::Error INVALID_ARGUMENT naming the field.
void validate_cache_config(const CacheConfig& config);

}  // namespace kvc
