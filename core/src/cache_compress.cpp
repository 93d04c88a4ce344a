// The compression entry points of a cache: kvc_compress and statistics reported by the
// engine's own attention (the driver is compressor.cpp).
#include <mutex>

#include "cache.hpp"
#include "kvcache/kvcache_error.hpp"

namespace kvc {

void Cache::compress(const std::vector<int32_t>& seq_ids, int32_t layer) {
  if ((layer < 0 && layer != kAllLayers) || layer >= config_.layers) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "layer " + std::to_string(layer) +
                                              " is out of range: " + std::to_string(kAllLayers) +
                                              " (all layers) or 0.." +
                                              std::to_string(config_.layers - 1));
  }
  std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
  const SequenceTable::SequenceLocks sequence_locks =
      sequences_.lock_sequences(seq_ids.data(), seq_ids.size(), true);
  std::vector<Sequence*> sequences;
  for (int32_t id : seq_ids) sequences.push_back(&sequences_.find(id));
  if (layer == kAllLayers) {
    compressor_.compress(sequences, seq_ids, 0, config_.layers, nullptr);
  } else {
    compressor_.compress(sequences, seq_ids, layer, layer + 1, nullptr);
  }
}

void Cache::report_stats(int32_t seq_id, int32_t layer, int32_t kv_head, kvc_stat_flags stat,
                         const float* values, int32_t n_values) {
  if (!(geometry_.stats & stat)) {
    throw Error(KVC_ERR_INVALID_ARGUMENT,
                "the policy does not track statistic " + std::to_string(static_cast<int>(stat)));
  }
  if (!values) throw Error(KVC_ERR_INVALID_ARGUMENT, "values is NULL");
  check_head(layer, kv_head);
  std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
  Sequence& sequence = sequences_.find(seq_id);
  const auto sequence_lock = SequenceTable::lock_sequence(sequence, true);
  const HeadStorage& head = storage(sequence, layer, kv_head);
  if (head.demoted_length() > 0) {
    throw Error(KVC_ERR_UNSUPPORTED,
                "the head holds demoted tokens (policy.demote), whose order kvc_seq_view cannot "
                "give the engine");
  }
  if (n_values != head.length()) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "n_values is " + std::to_string(n_values) +
                                              " but the head stores " +
                                              std::to_string(head.length()) + " tokens");
  }
  if (n_values == 0) return;
  const kvc_head_stats stats = head.stats(geometry_);
  float* target = stat == KVC_STAT_ATTN_SUM    ? stats.attn_sum
                  : stat == KVC_STAT_ATTN_LAST ? stats.attn_last
                                               : stats.attn_window;
  const size_t bytes = sizeof(float) * static_cast<size_t>(n_values);
  if (stat != KVC_STAT_ATTN_SUM) {
    backend_.copy(target, values, bytes, KVC_COPY_HOST_TO_DEVICE);
    return;
  }
  // Sums accumulate: read, add on the host, write back; a failed read changes nothing.
  std::vector<float> merged(static_cast<size_t>(n_values));
  backend_.copy(merged.data(), target, bytes, KVC_COPY_DEVICE_TO_HOST);
  for (size_t i = 0; i < merged.size(); ++i) merged[i] += values[i];
  backend_.copy(target, merged.data(), bytes, KVC_COPY_HOST_TO_DEVICE);
}

}  // namespace kvc
