// The order kvc_seq_view promises (storage order is position order), kept on the way in.
#include <string>
#include <vector>

#include "cache.hpp"
#include "error.hpp"

namespace kvc {

void Cache::check_positions(int32_t layer, const kvc_batch& batch,
                            const ResolvedBatch& resolved) {
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
  // The newest stored position of every head the batch appends to, in one read.
  struct Newest {
    size_t sequence;
    int32_t kv_head;
    kvc_segment segment;
    int32_t position;
  };
  std::vector<Newest> newest;
  for (size_t i = 0; i < resolved.sequences.size(); ++i) {
    for (int32_t h = 0; h < config_.kv_heads; ++h) {
      const HeadStore& head = store(*resolved.sequences[i], layer, h);
      const std::vector<Segment>& segments = head.segments();
      for (auto s = segments.rbegin(); s != segments.rend(); ++s) {
        if (s->count == 0) continue;
        const int32_t* last = segment_pos(*s, geometry_) + (s->count - 1);
        newest.push_back({i, h, kvc_segment{sizeof(kvc_segment), 1, nullptr, nullptr, last}, -1});
        break;
      }
    }
  }
  if (newest.empty()) return;
  std::vector<kvc_read_tokens_job> reads(newest.size());
  for (size_t n = 0; n < newest.size(); ++n) {
    reads[n].struct_size = sizeof(kvc_read_tokens_job);
    reads[n].n_segments = 1;
    reads[n].segments = &newest[n].segment;
    reads[n].out_pos = &newest[n].position;
  }
  backend_.read_tokens(reads, batch.stream);
  for (const Newest& n : newest) {
    const int32_t row = resolved.offsets[n.sequence];
    if (batch.positions[row] <= n.position) {
      refuse(row,
             "position " + std::to_string(n.position) + ", the newest stored on layer " +
                 std::to_string(layer) + " (kv_head " + std::to_string(n.kv_head) + ")",
             batch.seq_ids[n.sequence]);
    }
  }
}

}  // namespace kvc
