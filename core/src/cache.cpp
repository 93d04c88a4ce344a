#include "cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>

#include "cache_params.hpp"
#include "kvcache/kvcache_error.hpp"
#include "kvcache/kvcache_format.h"
#include "quote.hpp"

namespace kvc {
namespace {

Error invalid(const std::string& message) { return Error(KVC_ERR_INVALID_ARGUMENT, message); }

// Bytes per element of a passed tensor (f32 or a storage format without scales).
size_t element_bytes(kvc_dtype dtype) { return kvc_format_row_bytes(dtype, 1); }

const LoadedPlugin& find_backend(Context& context, const std::string& name) {
  const LoadedPlugin* plugin = context.plugins().find(KVC_PLUGIN_BACKEND, name);
  if (!plugin) {
    throw Error(KVC_ERR_NOT_FOUND, "backend " + quote(name) + " is not loaded (loaded backends: " +
                                       context.plugins().names_of(KVC_PLUGIN_BACKEND) + ")");
  }
  return *plugin;
}

TierRows tier_rows(kvc_dtype k_dtype, kvc_dtype v_dtype, int32_t head_dim) {
  const size_t v_group = kvc_format_group_bytes(v_dtype);
  return TierRows{k_dtype, v_dtype, kvc_format_row_bytes(k_dtype, static_cast<size_t>(head_dim)),
                  kvc_format_row_bytes(v_dtype, static_cast<size_t>(head_dim)),
                  // V rows start at their group's largest power-of-two divisor, at most a
                  // float's alignment: 4 for f32, 2 for f16 and bf16.
                  std::min(v_group & (0 - v_group), alignof(float))};
}

Geometry make_geometry(const CacheConfig& c, const Policy* policy) {
  constexpr uint32_t attention_stats = KVC_STAT_ATTN_SUM | KVC_STAT_ATTN_LAST | KVC_STAT_ATTN_WINDOW;
  Geometry g{c.layout,
             c.head_dim,
             {tier_rows(c.k_dtype, c.v_dtype, c.head_dim), TierRows{}},
             c.block_tokens,
             policy ? policy->stats() & attention_stats : 0u};
  if (!policy || !policy->config().demote.enabled) return g;
  const DemoteConfig& demote = policy->config().demote;
  g.tiers[1] = tier_rows(demote.k_dtype.value_or(c.k_dtype), demote.v_dtype.value_or(c.v_dtype),
                         c.head_dim);
  const std::string rows = std::string(kvc_format_name(g.tiers[1].k_dtype)) + " K and " +
                           kvc_format_name(g.tiers[1].v_dtype) + " V";
  if (c.layout != KVC_LAYOUT_PAGED) {
    throw invalid("policy.demote needs the paged layout: a demoted tier is a list of blocks");
  }
  if (g.token_bytes(1) >= g.token_bytes(0)) {
    throw invalid("policy.demote: " + rows + " take " + std::to_string(g.token_bytes(1)) +
                  " bytes a token, no fewer than the cache's formats (" +
                  std::to_string(g.token_bytes(0)) + ")");
  }
  const size_t block_bytes = g.bytes_for(c.block_tokens);
  int32_t fits = c.block_tokens;
  while (g.bytes_for(fits + 1, 1) <= block_bytes) ++fits;
  g.demoted_block_tokens = fits;
  return g;
}

std::unique_ptr<Policy> make_policy(Context& context, const std::optional<PolicyConfig>& config) {
  if (!config) return nullptr;
  return std::make_unique<Policy>(context.plugins(), context.host().api(), *config);
}

}  // namespace

Cache::Cache(Context& context, const CacheConfig& config,
             const std::optional<PolicyConfig>& policy)
    : context_(context),
      config_((validate_cache_config(config), config)),
      policy_(make_policy(context, policy)),
      schedule_(policy_ ? &policy_->config() : nullptr, config_.growth_factor),
      geometry_(make_geometry(config_, policy_.get())),
      backend_(find_backend(context, config_.backend), context.host().api(), config_),
      pool_(backend_, config_.memory_limit,
            config_.layout == KVC_LAYOUT_PAGED ? geometry_.bytes_for(config_.block_tokens) : 0),
      sequences_(backend_, pool_, geometry_, config_.layers, config_.kv_heads, counters_),
      memory_(backend_, pool_, geometry_, schedule_, context.logger(), counters_),
      compressor_(context, config_, policy_.get(), schedule_, geometry_, backend_, pool_,
                  sequences_, memory_, counters_) {
  if (geometry_.demotes() && !backend_.converts()) {
    throw Error(KVC_ERR_UNSUPPORTED, "backend " + quote(backend_.name()) +
                                         " cannot demote tokens (policy.demote): it has no "
                                         "convert entry (plugin ABI 1.6)");
  }
  const PrefixCacheConfig& prefix = config_.prefix_cache;
  if (!prefix.enabled) return;
  if (!prefix.store.empty()) context.store(prefix.store);  // NOT_FOUND naming it
  prefix_index_ = std::make_unique<PrefixIndex>(pool_, config_.block_tokens);
  pool_.set_reclaimer([this](size_t bytes) { return prefix_index_->reclaim(bytes); });
  pool_.set_releaser(
      [this](const std::vector<const void*>& blocks) { prefix_index_->drop(blocks); });
}

void Cache::check_new_sequence_id(int32_t seq_id) const { sequences_.check_new_id(seq_id); }

void Cache::create_sequence(int32_t seq_id) { sequences_.create(seq_id); }

void Cache::remove_sequence(int32_t seq_id, std::optional<uint64_t> unchanged_since) {
  sequences_.remove(seq_id, unchanged_since);
}

void Cache::reserve(int32_t seq_id, int32_t tokens) {
  if (tokens < 0) throw invalid("reserve: tokens must be >= 0, got " + std::to_string(tokens));
  std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
  Sequence& sequence = sequences_.find(seq_id);
  const auto sequence_lock = SequenceTable::lock_sequence(sequence, true);
  std::vector<HeadStorage*> targets;
  std::vector<int32_t> extra;
  for (HeadStorage& head : sequence.heads) {
    targets.push_back(&head);
    extra.push_back(std::max(0, tokens - head.length()));
  }
  memory_.keep(memory_.ensure_room(targets, extra, true));
}

void Cache::check_head(int32_t layer, int32_t kv_head) const {
  if (layer < 0 || layer >= config_.layers) {
    throw invalid("layer " + std::to_string(layer) + " is out of range 0.." +
                  std::to_string(config_.layers - 1));
  }
  if (kv_head < 0 || kv_head >= config_.kv_heads) {
    throw invalid("kv_head " + std::to_string(kv_head) + " is out of range 0.." +
                  std::to_string(config_.kv_heads - 1));
  }
}

int32_t Cache::length(int32_t seq_id, int32_t layer, int32_t kv_head) const {
  check_head(layer, kv_head);
  std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
  Sequence& sequence = sequences_.find(seq_id);
  const auto sequence_lock = SequenceTable::lock_sequence(sequence, false);
  return storage(sequence, layer, kv_head).length();
}

std::vector<kvc_segment> Cache::view(int32_t seq_id, int32_t layer, int32_t kv_head) const {
  check_head(layer, kv_head);
  std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
  Sequence& sequence = sequences_.find(seq_id);
  const auto sequence_lock = SequenceTable::lock_sequence(sequence, false);
  const HeadStorage& head = storage(sequence, layer, kv_head);
  if (head.demoted_length() > 0) {
    throw Error(KVC_ERR_UNSUPPORTED,
                "the head holds demoted tokens (policy.demote), in formats and an order "
                "kvc_seq_view cannot describe");
  }
  std::vector<kvc_segment> segments;
  head.gather(segments, geometry_);
  return segments;
}

ResolvedBatch Cache::resolve(int32_t layer, const kvc_batch& batch) const {
  if (layer < 0 || layer >= config_.layers) {
    throw invalid("layer " + std::to_string(layer) + " is out of range 0.." +
                  std::to_string(config_.layers - 1));
  }
  if (batch.n_seqs < 1) throw invalid("batch.n_seqs must be >= 1, got " + std::to_string(batch.n_seqs));
  if (!batch.seq_ids || !batch.n_tokens || !batch.positions) {
    throw invalid("batch.seq_ids, batch.n_tokens and batch.positions must not be NULL");
  }
  ResolvedBatch resolved;
  resolved.sequences.reserve(static_cast<size_t>(batch.n_seqs));
  resolved.offsets.reserve(static_cast<size_t>(batch.n_seqs));
  std::vector<int32_t> sorted_ids(batch.seq_ids, batch.seq_ids + batch.n_seqs);
  std::sort(sorted_ids.begin(), sorted_ids.end());
  auto repeated = std::adjacent_find(sorted_ids.begin(), sorted_ids.end());
  if (repeated != sorted_ids.end()) {
    throw invalid("sequence " + std::to_string(*repeated) + " appears twice in the batch");
  }
  int64_t total = 0;
  for (int32_t i = 0; i < batch.n_seqs; ++i) {
    int32_t id = batch.seq_ids[i];
    if (batch.n_tokens[i] < 1) {
      throw invalid("batch.n_tokens[" + std::to_string(i) + "] must be >= 1, got " +
                    std::to_string(batch.n_tokens[i]));
    }
    if (batch.prompt_end && batch.prompt_end[i] != 0 && batch.prompt_end[i] != 1) {
      throw invalid("batch.prompt_end[" + std::to_string(i) + "] must be 0 or 1, got " +
                    std::to_string(batch.prompt_end[i]));
    }
    resolved.sequences.push_back(&sequences_.find(id));
    resolved.offsets.push_back(static_cast<int32_t>(total));
    total += batch.n_tokens[i];
    if (total > INT32_MAX) throw invalid("batch has more than 2^31 tokens");
  }
  resolved.total_tokens = static_cast<int32_t>(total);
  for (int32_t t = 0; t < resolved.total_tokens; ++t) {
    if (batch.positions[t] < 0) {
      throw invalid("batch.positions[" + std::to_string(t) + "] must be >= 0, got " +
                    std::to_string(batch.positions[t]));
    }
  }
  return resolved;
}

void Cache::check_input(const kvc_tensor& t, kvc_dtype storage, int32_t heads, int32_t tokens,
                        const char* what) const {
  if (!t.data) throw invalid(std::string(what) + ": data is NULL");
  if (kvc_format_has_scales(t.dtype) || !kvc_format_takes_input(storage, t.dtype)) {
    throw invalid(std::string(what) + ": dtype must be f32 or the storage dtype " +
                  kvc_format_name(storage) +
                  (kvc_format_has_scales(storage) ? " (or f16 or bf16, which it quantizes)" : "") +
                  ", got " + kvc_format_name(t.dtype));
  }
  if (t.device != KVC_DEVICE_HOST && t.device != KVC_DEVICE_BACKEND) {
    throw invalid(std::string(what) + ": unknown device " + std::to_string(static_cast<int>(t.device)));
  }
  size_t row = static_cast<size_t>(heads) * config_.head_dim;
  if (t.row_stride != 0 && t.row_stride < row) {
    throw invalid(std::string(what) + ": row_stride " + std::to_string(t.row_stride) +
                  " is shorter than a row of " + std::to_string(row) + " elements");
  }
  check_extent(what, t.row_stride ? t.row_stride : row, row, element_bytes(t.dtype), tokens);
}

// The bytes from a tensor's first element to its last must be addressable, so that no row
// offset computed from them wraps around.
void Cache::check_extent(const char* what, size_t row_stride, size_t row, size_t element,
                         int32_t tokens) const {
  size_t elements = 0, bytes = 0;
  const bool overflows =
      __builtin_mul_overflow(static_cast<size_t>(tokens - 1), row_stride, &elements) ||
      __builtin_add_overflow(elements, row, &elements) ||
      __builtin_mul_overflow(elements, element, &bytes) ||
      bytes > static_cast<size_t>(PTRDIFF_MAX);
  if (overflows) {
    throw invalid(std::string(what) + ": row_stride " + std::to_string(row_stride) + " for " +
                  std::to_string(tokens) + " tokens spans more bytes than memory holds");
  }
}

void Cache::check_attention_inputs(const kvc_tensor& q, const kvc_attention_params& params,
                                   const kvc_tensor_mut& out, int32_t tokens) const {
  check_input(q, config_.k_dtype, config_.q_heads, tokens, "q");
  if (!out.data) throw invalid("out: data is NULL");
  if (out.dtype != KVC_DTYPE_F32) throw invalid("out: dtype must be f32");
  if (out.device != KVC_DEVICE_HOST && out.device != KVC_DEVICE_BACKEND) {
    throw invalid("out: unknown device " + std::to_string(static_cast<int>(out.device)));
  }
  size_t row = static_cast<size_t>(config_.q_heads) * config_.head_dim;
  if (out.row_stride != 0 && out.row_stride < row) {
    throw invalid("out: row_stride " + std::to_string(out.row_stride) +
                  " is shorter than a row of " + std::to_string(row) + " elements");
  }
  check_extent("out", out.row_stride ? out.row_stride : row, row, sizeof(float), tokens);
  if (params.sliding_window < 0) throw invalid("sliding_window must be >= 0");
  if (!(params.softcap >= 0.0f) || !(params.scale >= 0.0f)) {
    throw invalid("scale and softcap must be >= 0");
  }
}

void Cache::check_kv_inputs(const kvc_tensor& k, const kvc_tensor& v, int32_t tokens) const {
  check_input(k, config_.k_dtype, config_.kv_heads, tokens, "k");
  check_input(v, config_.v_dtype, config_.kv_heads, tokens, "v");
  if (k.device != v.device) throw invalid("k and v must be on the same device");
}

Cache::AppendLock Cache::lock_for_append(int32_t layer, const kvc_batch& batch) const {
  const size_t n = static_cast<size_t>(std::max(batch.n_seqs, 0));
  AppendLock lock{std::shared_lock<std::shared_mutex>(sequences_.mutex()), {}, {}};
  lock.sequences = sequences_.lock_sequences(batch.seq_ids, n, true);
  if (!compressor_.once_due(layer, batch)) return lock;
  // Another call may make the compression due, or not, between the two holds:
  // compress_before_append decides again under the exclusive one.
  lock.sequences.clear();
  lock.shared.unlock();
  lock.exclusive = std::unique_lock<std::shared_mutex>(sequences_.mutex());
  lock.sequences = sequences_.lock_sequences(batch.seq_ids, n, true);
  return lock;
}

void Cache::append(int32_t layer, const kvc_batch& batch, const kvc_tensor& k,
                   const kvc_tensor& v) {
  const AppendLock lock = lock_for_append(layer, batch);
  ResolvedBatch resolved = resolve(layer, batch);
  check_positions(layer, batch, resolved);
  check_kv_inputs(k, v, resolved.total_tokens);
  Compressor::OnceCompression once = compressor_.compress_before_append(layer, batch, resolved);
  try {
    memory_.keep(append_locked(layer, batch, resolved, k, v));
  } catch (...) {
    compressor_.roll_back(once);
    throw;
  }
  compressor_.commit(once, layer);
}

Replacements Cache::append_locked(int32_t layer, const kvc_batch& batch,
                                         const ResolvedBatch& resolved, const kvc_tensor& k,
                                         const kvc_tensor& v) {
  const int32_t heads = config_.kv_heads;
  std::vector<HeadStorage*> targets;
  std::vector<int32_t> extra;
  targets.reserve(resolved.sequences.size() * static_cast<size_t>(heads));
  extra.reserve(targets.capacity());
  for (size_t i = 0; i < resolved.sequences.size(); ++i) {
    for (int32_t h = 0; h < heads; ++h) {
      targets.push_back(&storage(*resolved.sequences[i], layer, h));
      extra.push_back(batch.n_tokens[i]);
    }
  }
  Replacements grown = memory_.ensure_room(targets, extra, false, batch.stream);

  const size_t d = static_cast<size_t>(config_.head_dim);
  const size_t row = static_cast<size_t>(heads) * d;
  std::vector<kvc_append_slot> slots;
  slots.reserve(targets.size() * 2);
  for (size_t s = 0; s < targets.size(); ++s) {
    const size_t i = s / static_cast<size_t>(heads);
    const int32_t h = static_cast<int32_t>(s % static_cast<size_t>(heads));
    targets[s]->plan_append(extra[s], resolved.offsets[i], h, geometry_, slots);
  }
  kvc_append_tensors_call call{};
  call.n_tokens = resolved.total_tokens;
  call.stream = batch.stream;
  call.src_k = k.data;
  call.src_v = v.data;
  call.src_k_dtype = k.dtype;
  call.src_v_dtype = v.dtype;
  call.src_device = k.device;
  call.src_k_token_stride = k.row_stride ? k.row_stride : row;
  call.src_k_head_stride = d;
  call.src_v_token_stride = v.row_stride ? v.row_stride : row;
  call.src_v_head_stride = d;
  call.src_pos = batch.positions;
  try {
    backend_.append(slots, call);
  } catch (...) {
    memory_.undo(grown);
    for (HeadStorage* s : targets) s->release_empty_blocks(pool_, geometry_);
    throw;
  }
  for (size_t s = 0; s < targets.size(); ++s) {
    const size_t i = s / static_cast<size_t>(heads);
    targets[s]->commit_append(extra[s], batch.positions[resolved.offsets[i] + extra[s] - 1],
                              geometry_);
    counters_.tokens_stored += static_cast<uint64_t>(extra[s]);
  }
  return grown;
}

void Cache::attend(int32_t layer, const kvc_batch& batch, const kvc_tensor& q,
                   const kvc_attention_params& params, const kvc_tensor_mut& out) {
  std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
  const SequenceTable::SequenceLocks sequence_locks = sequences_.lock_sequences(
      batch.seq_ids, static_cast<size_t>(std::max(batch.n_seqs, 0)), true);
  attend_locked(layer, batch, resolve(layer, batch), q, params, out);
}

void Cache::attend_locked(int32_t layer, const kvc_batch& batch, const ResolvedBatch& resolved,
                          const kvc_tensor& q, const kvc_attention_params& params,
                          const kvc_tensor_mut& out) {
  const int32_t kv_heads = config_.kv_heads;
  const int32_t group = config_.q_heads / kv_heads;
  const size_t d = static_cast<size_t>(config_.head_dim);
  check_attention_inputs(q, params, out, resolved.total_tokens);
  size_t row = static_cast<size_t>(config_.q_heads) * d;
  size_t q_stride = q.row_stride ? q.row_stride : row;
  size_t out_stride = out.row_stride ? out.row_stride : row;

  std::vector<kvc_attend_job> jobs;
  jobs.reserve(resolved.sequences.size() * static_cast<size_t>(kv_heads));
  const size_t q_element = element_bytes(q.dtype);
  for (size_t i = 0; i < resolved.sequences.size(); ++i) {
    const size_t token = static_cast<size_t>(resolved.offsets[i]);
    for (int32_t h = 0; h < kv_heads; ++h) {
      const HeadStorage& head = storage(*resolved.sequences[i], layer, h);
      const std::vector<kvc_segment>& segments = head.attend_table(geometry_);
      const size_t head_offset = static_cast<size_t>(h) * group * d;
      kvc_attend_job job{};
      job.struct_size = sizeof(job);
      job.n_queries = batch.n_tokens[i];
      job.q = static_cast<const unsigned char*>(q.data) + (token * q_stride + head_offset) * q_element;
      job.q_stride = q_stride;
      job.q_dtype = q.dtype;
      job.q_device = q.device;
      job.q_pos = batch.positions + token;
      job.out = static_cast<float*>(out.data) + token * out_stride + head_offset;
      job.out_stride = out_stride;
      job.out_device = out.device;
      job.segments = segments.data();
      job.n_segments = static_cast<int32_t>(segments.size());
      job.stats = head.stats(geometry_);
      // A demoted tier's blocks hold another count than the cache's: no promise of equal
      // counts, so no table id (kvcache_plugin.h, "Resident segment tables").
      if (head.demoted_length() == 0) {
        job.table_id = head.table_id();
        job.table_version = head.table_version();
      }
      jobs.push_back(job);
    }
  }
  kvc_attend_call call{};
  call.group_size = group;
  call.scale = params.scale > 0.0f ? params.scale : 1.0f / std::sqrt(static_cast<float>(d));
  call.sliding_window = params.sliding_window;
  call.softcap = params.softcap;
  call.observation_window = policy_ ? policy_->observation_window() : 0;
  call.stream = batch.stream;
  Compressor::AfterAttend after = compressor_.plan_after_attend(layer, batch, resolved);
  backend_.attend(jobs, call);
  compressor_.compress_after_attend(layer, resolved, after, batch.stream);
}

void Cache::append_attend(int32_t layer, const kvc_batch& batch, const kvc_tensor& q,
                          const kvc_tensor& k, const kvc_tensor& v,
                          const kvc_attention_params& params, const kvc_tensor_mut& out) {
  const AppendLock lock = lock_for_append(layer, batch);
  ResolvedBatch resolved = resolve(layer, batch);
  check_positions(layer, batch, resolved);
  check_kv_inputs(k, v, resolved.total_tokens);
  check_attention_inputs(q, params, out, resolved.total_tokens);
  Compressor::OnceCompression once = compressor_.compress_before_append(layer, batch, resolved);
  // What each head held before the append, put back if the attention fails.
  struct Before {
    HeadStorage* head;
    int32_t length;
    int32_t newest_position;
  };
  std::vector<Before> before;
  for (Sequence* seq : resolved.sequences) {
    for (int32_t h = 0; h < config_.kv_heads; ++h) {
      HeadStorage& head = storage(*seq, layer, h);
      before.push_back(Before{&head, head.length(), head.newest_position()});
    }
  }
  Replacements grown;
  try {
    grown = append_locked(layer, batch, resolved, k, v);
  } catch (...) {
    compressor_.roll_back(once);
    throw;
  }
  try {
    attend_locked(layer, batch, resolved, q, params, out);
  } catch (...) {
    for (const Before& b : before) {
      const int32_t added = b.head->length() - b.length;
      counters_.tokens_stored -= static_cast<uint64_t>(added);
      b.head->truncate(b.length, b.newest_position, pool_, geometry_);
      b.head->forget(added);
    }
    memory_.undo(grown);
    for (const Before& b : before) b.head->release_empty_blocks(pool_, geometry_);
    compressor_.roll_back(once);
    throw;
  }
  memory_.keep(grown);
  compressor_.commit(once, layer);
}

kvc_cache_stats Cache::stats() const {
  PoolCounters counters = pool_.counters();
  kvc_cache_stats s{};
  s.struct_size = sizeof(s);
  s.bytes_used = counters.bytes_used;
  s.bytes_peak = counters.bytes_peak;
  s.bytes_limit = pool_.memory_limit();
  s.bytes_reserved = counters.bytes_reserved;
  s.tokens_stored = counters_.tokens_stored.load();
  s.tokens_evicted = counters_.tokens_evicted.load();
  s.tokens_demoted = counters_.tokens_demoted.load();
  s.bytes_copied = counters_.bytes_copied.load();
  s.blocks_used = counters.blocks_used;
  s.blocks_free = pool_.blocks_available();
  s.bytes_shared = counters.bytes_shared;
  s.bytes_cached = counters.bytes_cached;
  if (prefix_index_) {
    const PrefixIndexCounters prefix = prefix_index_->counters();
    s.bytes_reclaimed = prefix.bytes_reclaimed;
    s.prefix_hits = prefix.hits;
    s.prefix_tokens_reused = prefix.tokens_reused;
  }
  std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
  s.sequences = static_cast<int32_t>(sequences_.size());
  return s;
}

}  // namespace kvc
