#include "head_rebuild.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

namespace kvc {
namespace {

// Where a head's stored token i is: its segment and the token's offset there.
class SourceTokens {
 public:
  explicit SourceTokens(const HeadStorage& head) : segments_(head.segments()) {
    int32_t first = 0;
    for (const Segment& s : segments_) {
      starts_.push_back(first);
      first += s.count;
    }
  }
  std::pair<size_t, int32_t> locate(int32_t token) const {
    const size_t index =
        static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), token) - starts_.begin()) - 1;
    return {index, token - starts_[index]};
  }
  const Segment& segment(size_t index) const { return segments_[index]; }

 private:
  const std::vector<Segment>& segments_;
  std::vector<int32_t> starts_;
};

// One head's new storage while it is written.
struct NewHead {
  std::vector<Segment> segments;
  std::vector<std::vector<int32_t>> positions;  // [segment], host copies to write
  float* stats = nullptr;
  int32_t newest_position = -1;
};

class Writer {
 public:
  Writer(const Geometry& g, std::vector<void*>& blocks) : g_(g), blocks_(blocks) {}

  // Places `tokens` of the head (storage indices) in new blocks of `tier`, one convert job per
  // run that is consecutive in one source segment and one new block.
  void place(const TierPlan& plan, const std::vector<int32_t>& tokens, uint8_t tier,
             NewHead& out) {
    const SourceTokens source(*plan.head);
    const int32_t capacity = g_.block_capacity(tier);
    const TierRows& to = g_.rows(tier);
    for (size_t first = 0; first < tokens.size(); first += static_cast<size_t>(capacity)) {
      const int32_t count =
          static_cast<int32_t>(std::min(tokens.size() - first, static_cast<size_t>(capacity)));
      Segment block{static_cast<unsigned char*>(blocks_[next_block_++]), capacity, count, tier};
      std::vector<int32_t> positions;
      auto stored = [&](int32_t t) {
        const int32_t token = tokens[first + static_cast<size_t>(t)];
        return plan.order->empty() ? token : (*plan.order)[static_cast<size_t>(token)];
      };
      for (int32_t t = 0; t < count;) {
        const int32_t index_stored = stored(t);
        const auto [index, offset] = source.locate(index_stored);
        const Segment& from = source.segment(index);
        int32_t run = 1;
        while (t + run < count && stored(t + run) == index_stored + run &&
               offset + run < from.count) {
          ++run;
        }
        const TierRows& rows = g_.rows(from.tier);
        kvc_convert_job job{};
        job.struct_size = sizeof(job);
        job.n_tokens = run;
        job.src_k = segment_k(from) + static_cast<size_t>(offset) * rows.k_row_bytes;
        job.src_v = segment_v(from, g_) + static_cast<size_t>(offset) * rows.v_row_bytes;
        job.src_k_dtype = rows.k_dtype;
        job.src_v_dtype = rows.v_dtype;
        job.dst_k = segment_k(block) + static_cast<size_t>(t) * to.k_row_bytes;
        job.dst_v = segment_v(block, g_) + static_cast<size_t>(t) * to.v_row_bytes;
        job.dst_k_dtype = to.k_dtype;
        job.dst_v_dtype = to.v_dtype;
        jobs_.push_back(job);
        for (int32_t r = 0; r < run; ++r) {
          const size_t token = static_cast<size_t>(tokens[first + static_cast<size_t>(t + r)]);
          const int32_t position = (*plan.positions)[token];
          positions.push_back(position);
          out.newest_position = std::max(out.newest_position, position);
        }
        t += run;
      }
      out.segments.push_back(block);
      out.positions.push_back(std::move(positions));
    }
  }

  const std::vector<kvc_convert_job>& jobs() const { return jobs_; }

 private:
  const Geometry& g_;
  std::vector<void*>& blocks_;
  size_t next_block_ = 0;
  std::vector<kvc_convert_job> jobs_;
};

size_t blocks_for(size_t tokens, int32_t capacity) {
  return (tokens + static_cast<size_t>(capacity) - 1) / static_cast<size_t>(capacity);
}

// The statistics of the kept tokens in their new order, each tracked one written at its
// region of the new array.
void write_stats(const TierPlan& plan, float* stats, Backend& backend, const Geometry& g,
                 void* stream) {
  const size_t capacity = static_cast<size_t>(plan.head->stats_capacity());
  size_t region = 0;
  for (size_t s = 0; s < std::size(kStoredStats); ++s) {
    if (!(g.stats & kStoredStats[s])) continue;
    std::vector<float> values;
    for (const std::vector<int32_t>* tokens : {&plan.demoted, &plan.kept}) {
      for (int32_t token : *tokens) values.push_back(plan.stats[s][static_cast<size_t>(token)]);
    }
    if (!values.empty()) {
      backend.copy(stats + region * capacity, values.data(), values.size() * sizeof(float),
                   KVC_COPY_HOST_TO_DEVICE, stream);
    }
    ++region;
  }
}

}  // namespace

HeadRewrite::HeadRewrite(const std::vector<TierPlan>& plans, Backend& backend, BlockPool& pool,
                         const Geometry& g, void* stream)
    : plans_(plans), pool_(pool), g_(g), stream_(stream) {
  size_t blocks = 0;
  for (const TierPlan& plan : plans) {
    blocks += blocks_for(plan.demoted.size(), g.block_capacity(1)) +
              blocks_for(plan.kept.size(), g.block_capacity(0));
    if (plan.head->stats_array()) sizes_.push_back(g.stats_bytes_for(plan.head->stats_capacity()));
  }
  taken_ = pool.take(blocks, sizes_);
  std::vector<NewHead> heads(plans.size());
  try {
    Writer writer(g, taken_.blocks);
    size_t next_memory = 0;
    for (size_t i = 0; i < plans.size(); ++i) {
      writer.place(plans[i], plans[i].demoted, 1, heads[i]);
      writer.place(plans[i], plans[i].kept, 0, heads[i]);
      if (plans[i].head->stats_array()) heads[i].stats = static_cast<float*>(taken_.memory[next_memory++]);
    }
    backend.convert(writer.jobs(), stream);
    for (size_t i = 0; i < plans.size(); ++i) {
      const NewHead& head = heads[i];
      for (size_t s = 0; s < head.segments.size(); ++s) {
        backend.copy(segment_pos(head.segments[s], g), head.positions[s].data(),
                     head.positions[s].size() * sizeof(int32_t), KVC_COPY_HOST_TO_DEVICE, stream);
      }
      if (head.stats) write_stats(plans[i], head.stats, backend, g, stream);
    }
  } catch (...) {
    give_back();
    throw;
  }
  for (NewHead& head : heads) {
    segments_.push_back(std::move(head.segments));
    stats_.push_back(head.stats);
    newest_.push_back(head.newest_position);
  }
}

HeadRewrite::~HeadRewrite() {
  if (!committed_) give_back();
}

void HeadRewrite::give_back() {
  for (void* block : taken_.blocks) pool_.give_back_block(block);
  for (size_t i = 0; i < taken_.memory.size(); ++i) pool_.release(taken_.memory[i], sizes_[i], stream_);
}

void HeadRewrite::commit() {
  committed_ = true;
  for (size_t i = 0; i < plans_.size(); ++i) {
    HeadStorage& head = *plans_[i].head;
    const int32_t stats_capacity = head.stats_capacity();
    auto [old_segments, old_stats] =
        head.replace_tokens(std::move(segments_[i]), stats_[i], stats_capacity, newest_[i]);
    for (const Segment& s : old_segments) pool_.give_back_block(s.base);
    if (old_stats) pool_.release(old_stats, g_.stats_bytes_for(stats_capacity), stream_);
  }
}

void rebuild_heads(const std::vector<TierPlan>& plans, Backend& backend, BlockPool& pool,
                   const Geometry& g, void* stream) {
  HeadRewrite(plans, backend, pool, g, stream).commit();
}

}  // namespace kvc
