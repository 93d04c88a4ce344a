// The order kvc_seq_view promises (storage order is position order), kept on the way in.
#include <string>

#include "cache.hpp"
#include "kvcache/kvcache_error.hpp"

namespace kvc {

void Cache::check_positions(int32_t layer, const kvc_batch& batch,
                            const ResolvedBatch& resolved) const {
  const auto refuse = [&](int32_t row, const std::string& problem, int32_t seq) {
    throw Error(KVC_ERR_INVALID_ARGUMENT,
                "batch.positions[" + std::to_string(row) + "] = " +
                    std::to_string(batch.positions[row]) + " does not follow " + problem +
                    " of sequence " + std::to_string(seq) +
                    ": positions must increase strictly within a sequence");
  };
  for (size_t i = 0; i < resolved.sequences.size(); ++i) {
    const int32_t first = resolved.offsets[i];
    for (int32_t t = first + 1; t < first + batch.n_tokens[i]; ++t) {
      if (batch.positions[t] <= batch.positions[t - 1]) {
        refuse(t, "batch.positions[" + std::to_string(t - 1) + "] = " +
                      std::to_string(batch.positions[t - 1]),
               batch.seq_ids[i]);
      }
    }
  }
  // From each head's newest stored position, which the host keeps: no backend memory is read.
  for (size_t i = 0; i < resolved.sequences.size(); ++i) {
    const int32_t row = resolved.offsets[i];
    for (int32_t h = 0; h < config_.kv_heads; ++h) {
      const HeadStorage& head = storage(*resolved.sequences[i], layer, h);
      if (head.length() == 0 || batch.positions[row] > head.newest_position()) continue;
      refuse(row,
             "position " + std::to_string(head.newest_position()) +
                 ", the newest stored on layer " + std::to_string(layer) + " (kv_head " +
                 std::to_string(h) + ")",
             batch.seq_ids[i]);
    }
  }
}

}  // namespace kvc
