// Export and import of one sequence as a SequenceImage (the format is sequence_image.cpp's).
#include <algorithm>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <string>

#include "cache.hpp"
#include "image_heads.hpp"
#include "kvcache/kvcache_error.hpp"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_rotation.h"

namespace kvc {
namespace {

const char* stat_name(kvc_stat_flags stat) {
  switch (stat) {
    case KVC_STAT_ATTN_SUM: return "attn_sum";
    case KVC_STAT_ATTN_LAST: return "attn_last";
    case KVC_STAT_ATTN_WINDOW: return "attn_window";
    default: return "keys";
  }
}

// Cuts a head's segments down to its first n tokens.
void keep_first_tokens(std::vector<kvc_segment>& segments, size_t n) {
  size_t kept = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    const size_t count = static_cast<size_t>(segments[s].count);
    if (kept + count >= n) {
      segments[s].count = static_cast<int32_t>(n - kept);
      segments.resize(n == kept ? s : s + 1);
      return;
    }
    kept += count;
  }
}

}  // namespace

SequenceImage Cache::image_without_rows(const Sequence& sequence, size_t max_tokens,
                                        std::vector<std::vector<kvc_segment>>& segments) {
  SequenceImage image;
  image.layers = config_.layers;
  image.kv_heads = config_.kv_heads;
  image.q_heads = config_.q_heads;
  image.head_dim = config_.head_dim;
  image.k_dtype = config_.k_dtype;
  image.v_dtype = config_.v_dtype;
  image.layout = config_.layout;
  image.k_rotation = config_.k_rotation;
  image.stats = geometry_.stats;
  image.heads.resize(sequence.heads.size());
  for (const TriggerState& t : sequence.triggers) {
    image.triggers.push_back(LayerTriggers{t.decode_steps, t.prefill_pending});
  }

  // Positions and statistics in one batched read.
  segments.assign(sequence.heads.size(), {});
  std::vector<kvc_read_tokens_job> reads;
  for (size_t i = 0; i < sequence.heads.size(); ++i) {
    const HeadStorage& head = sequence.heads[i];
    HeadImage& out = image.heads[i];
    const size_t n = std::min(static_cast<size_t>(head.length()), max_tokens);
    out.seen = head.seen();
    out.effective_budget = head.effective_budget();
    out.demoted = std::min(head.demoted_length(), static_cast<int32_t>(n));
    if (out.demoted > 0) image.demoted = demoted_formats();
    out.positions.resize(n);
    head.gather(segments[i], geometry_);
    keep_first_tokens(segments[i], n);
    kvc_read_tokens_job job{};
    job.struct_size = sizeof(job);
    job.n_segments = static_cast<int32_t>(segments[i].size());
    job.segments = segments[i].data();
    job.stats = head.stats(geometry_);
    job.out_pos = out.positions.data();
    float** outs[] = {&job.out_attn_sum, &job.out_attn_last, &job.out_attn_window};
    for (size_t s = 0; s < std::size(kStoredStats); ++s) {
      if (!(geometry_.stats & kStoredStats[s])) continue;
      out.stats[s].resize(n);
      *outs[s] = out.stats[s].data();
    }
    if (n > 0) reads.push_back(job);
  }
  backend_.read_tokens(reads, nullptr);
  return image;
}

void Cache::copy_rows(const std::vector<kvc_segment>& segments, uint8_t* k, uint8_t* v) {
  const size_t d = static_cast<size_t>(config_.head_dim);
  for (const kvc_segment& s : segments) {
    // Each segment's rows are of its tier's formats (HeadStorage::gather names them).
    const size_t k_bytes = static_cast<size_t>(s.count) * kvc_format_row_bytes(s.k_dtype, d);
    const size_t v_bytes = static_cast<size_t>(s.count) * kvc_format_row_bytes(s.v_dtype, d);
    backend_.copy(k, s.k, k_bytes, KVC_COPY_DEVICE_TO_HOST);
    backend_.copy(v, s.v, v_bytes, KVC_COPY_DEVICE_TO_HOST);
    k += k_bytes;
    v += v_bytes;
  }
}

DemotedFormats Cache::demoted_formats() const {
  return DemotedFormats{geometry_.rows(1).k_dtype, geometry_.rows(1).v_dtype};
}

void Cache::check_demoted_formats(const DemotedFormats& image) const {
  const auto formats = [](const DemotedFormats& f) {
    return std::string(kvc_format_name(f.k_dtype)) + " K and " + kvc_format_name(f.v_dtype) + " V";
  };
  if (!geometry_.demotes()) {
    throw Error(KVC_ERR_UNSUPPORTED, "import: the sequence holds demoted tokens (" +
                                         formats(image) +
                                         "), and this cache does not demote (policy.demote)");
  }
  if (image != demoted_formats()) {
    throw Error(KVC_ERR_UNSUPPORTED, "import: the sequence's demoted tokens are stored as " +
                                         formats(image) + ", this cache demotes into " +
                                         formats(demoted_formats()) +
                                         " (demoted rows are imported only as they are)");
  }
}

SequenceImage Cache::export_sequence(int32_t seq_id, size_t max_tokens) {
  std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
  Sequence& sequence = sequences_.find(seq_id);
  const auto sequence_lock = SequenceTable::lock_sequence(sequence, false);
  std::vector<std::vector<kvc_segment>> segments;
  SequenceImage image = image_without_rows(sequence, max_tokens, segments);
  for (size_t i = 0; i < image.heads.size(); ++i) {
    HeadImage& head = image.heads[i];
    const size_t demoted = static_cast<size_t>(head.demoted);
    const size_t own = head.positions.size() - demoted;
    head.k.resize(demoted * geometry_.rows(1).k_row_bytes + own * geometry_.rows().k_row_bytes);
    head.v.resize(demoted * geometry_.rows(1).v_row_bytes + own * geometry_.rows().v_row_bytes);
    copy_rows(segments[i], head.k.data(), head.v.data());
  }
  return image;
}

size_t Cache::encoded_size_of(const Sequence& sequence, uint64_t offload_version) const {
  std::vector<size_t> head_tokens, head_demoted;
  std::optional<DemotedFormats> demoted;
  for (const HeadStorage& head : sequence.heads) {
    head_tokens.push_back(static_cast<size_t>(head.length()));
    head_demoted.push_back(static_cast<size_t>(head.demoted_length()));
    if (head.demoted_length() > 0) demoted = demoted_formats();
  }
  return encoded_size(config_.layers, config_.head_dim, config_.k_dtype, config_.v_dtype,
                      geometry_.stats, head_tokens, offload_version, config_.k_rotation, demoted,
                      head_demoted);
}

size_t Cache::encode_sequence(const Sequence& sequence, uint8_t* out, size_t capacity,
                              uint64_t offload_version) {
  class SegmentRows final : public RowWriter {
   public:
    SegmentRows(Cache& cache, const std::vector<std::vector<kvc_segment>>& segments)
        : cache_(cache), segments_(segments) {}
    void write(size_t head, uint8_t* k, uint8_t* v) const override {
      cache_.copy_rows(segments_[head], k, v);
    }

   private:
    Cache& cache_;
    const std::vector<std::vector<kvc_segment>>& segments_;
  };
  std::vector<std::vector<kvc_segment>> segments;
  SequenceImage image = image_without_rows(sequence, std::numeric_limits<size_t>::max(), segments);
  image.offload_version = offload_version;
  return encode(image, SegmentRows(*this, segments), out, capacity);
}

size_t Cache::export_size(int32_t seq_id) const {
  std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
  Sequence& sequence = sequences_.find(seq_id);
  const auto sequence_lock = SequenceTable::lock_sequence(sequence, false);
  return encoded_size_of(sequence);
}

size_t Cache::export_to(int32_t seq_id, uint8_t* out, size_t capacity) {
  std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
  Sequence& sequence = sequences_.find(seq_id);
  const auto sequence_lock = SequenceTable::lock_sequence(sequence, false);
  return encode_sequence(sequence, out, capacity);
}

support::LargeBytes Cache::export_bytes(int32_t seq_id, uint64_t offload_version,
                                        uint64_t* out_changes) {
  std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
  Sequence& sequence = sequences_.find(seq_id);
  const auto sequence_lock = SequenceTable::lock_sequence(sequence, false);
  if (out_changes) *out_changes = sequence.changes;
  support::LargeBytes bytes =
      support::LargeBytes::allocate(encoded_size_of(sequence, offload_version));
  if (bytes.data() == nullptr) throw std::bad_alloc();
  encode_sequence(sequence, bytes.data(), bytes.size(), offload_version);
  return bytes;
}

void Cache::import_sequence(int32_t seq_id, SequenceImage image) {
  SequenceTable::check_id(seq_id);
  if (image.layers != config_.layers || image.kv_heads != config_.kv_heads ||
      image.q_heads != config_.q_heads || image.head_dim != config_.head_dim) {
    throw Error(KVC_ERR_INVALID_ARGUMENT,
                "import: the sequence has shape (layers " + std::to_string(image.layers) +
                    ", kv_heads " + std::to_string(image.kv_heads) + ", q_heads " +
                    std::to_string(image.q_heads) + ", head_dim " + std::to_string(image.head_dim) +
                    "), this cache (" + std::to_string(config_.layers) + ", " +
                    std::to_string(config_.kv_heads) + ", " + std::to_string(config_.q_heads) +
                    ", " + std::to_string(config_.head_dim) + ")");
  }
  if (image.k_rotation != config_.k_rotation) {
    throw Error(KVC_ERR_INVALID_ARGUMENT,
                std::string("import: the sequence's keys are stored with k_rotation ") +
                    kvc_rotation_name(image.k_rotation) + ", this cache's with " +
                    kvc_rotation_name(config_.k_rotation) +
                    " (a cache reads only keys rotated as its own)");
  }
  for (kvc_stat_flags stat : kStoredStats) {
    if ((geometry_.stats & stat) && !(image.stats & stat)) {
      throw Error(KVC_ERR_UNSUPPORTED, std::string("import: the sequence carries no ") +
                                           stat_name(stat) +
                                           " statistic, which this cache's policy reads");
    }
  }
  if (image.demoted) check_demoted_formats(*image.demoted);
  convert_storage(image, config_.k_dtype, config_.v_dtype);

  std::unique_lock<std::shared_mutex> lock(sequences_.mutex());
  sequences_.require_unused(seq_id);
  auto sequence = std::make_unique<Sequence>();
  sequence->heads.resize(image.heads.size());
  for (const LayerTriggers& t : image.triggers) {
    sequence->triggers.push_back(TriggerState{t.decode_steps, t.prefill_pending});
  }
  std::vector<HeadStorage*> targets;
  std::vector<int32_t> lengths;
  for (size_t i = 0; i < image.heads.size(); ++i) {
    targets.push_back(&sequence->heads[i]);
    lengths.push_back(static_cast<int32_t>(image.heads[i].positions.size()));
  }
  if (image.demoted) {
    // The append path stores rows of the cache's own formats only: each tier is copied into
    // blocks of its formats instead.
    build_tiered_heads(image, targets, backend_, pool_, geometry_);
    sequences_.add(seq_id, std::move(sequence));
    return;
  }
  // All or nothing, exactly the size needed.
  memory_.keep(memory_.ensure_room(targets, lengths, true));
  try {
    // Each head's rows are their own tensor: one append per head.
    for (size_t i = 0; i < image.heads.size(); ++i) {
      const HeadImage& head = image.heads[i];
      if (head.positions.empty()) continue;
      std::vector<kvc_append_slot> slots;
      targets[i]->plan_append(lengths[i], 0, 0, geometry_, slots);
      kvc_append_tensors_call call{};
      call.n_tokens = lengths[i];
      call.src_k = head.k_rows();
      call.src_v = head.v_rows();
      call.src_k_dtype = config_.k_dtype;
      call.src_v_dtype = config_.v_dtype;
      call.src_device = KVC_DEVICE_HOST;
      call.src_k_token_stride = static_cast<size_t>(config_.head_dim);
      call.src_v_token_stride = static_cast<size_t>(config_.head_dim);
      call.src_pos = head.positions.data();
      call.k_rotated = config_.k_rotation != KVC_ROTATION_NONE;
      backend_.append(slots, call);
    }
    for (size_t i = 0; i < image.heads.size(); ++i) {
      const kvc_head_stats stats = targets[i]->stats(geometry_);
      float* targets[] = {stats.attn_sum, stats.attn_last, stats.attn_window};
      for (size_t s = 0; s < std::size(kStoredStats); ++s) {
        if (!targets[s] || lengths[i] == 0) continue;
        backend_.copy(targets[s], image.heads[i].stats[s].data(),
                      sizeof(float) * static_cast<size_t>(lengths[i]), KVC_COPY_HOST_TO_DEVICE);
      }
    }
  } catch (...) {
    for (HeadStorage* target : targets) target->release_all(pool_, geometry_);
    throw;
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const std::vector<int32_t>& positions = image.heads[i].positions;
    targets[i]->commit_append(lengths[i], positions.empty() ? -1 : positions.back(), geometry_);
    targets[i]->restore_counters(image.heads[i].seen, image.heads[i].effective_budget);
  }
  sequences_.add(seq_id, std::move(sequence));
}

}  // namespace kvc
