// The compression driver: per (sequence, layer) ask the policy for scores and budgets, pick
// the kept tokens, compact storage through the backend and return emptied blocks.
#include <algorithm>
#include <cmath>
#include <mutex>

#include "cache.hpp"
#include "error.hpp"
#include "selection.hpp"

namespace kvc {
namespace {

// Host copies of what a policy reads about one (sequence, layer, KV head).
struct HeadInputs {
  std::vector<int32_t> positions;
  std::vector<float> stats[std::size(kStoredStats)];
  std::vector<float> keys;
  std::vector<float> scores;
};

}  // namespace

template <typename T>
void Cache::read_rows(const std::vector<kvc_segment>& segments,
                      const T* (*field)(const kvc_segment&), std::vector<T>& out) {
  out.clear();
  for (const kvc_segment& seg : segments) {
    size_t at = out.size();
    out.resize(at + static_cast<size_t>(seg.count));
    backend_.copy(out.data() + at, field(seg), sizeof(T) * static_cast<size_t>(seg.count),
                  KVC_COPY_DEVICE_TO_HOST);
  }
}

void Cache::select_layer(LayerSelection& selection, int32_t seq_id) {
  const int32_t heads = config_.kv_heads;
  std::vector<HeadInputs> inputs(static_cast<size_t>(heads));
  std::vector<kvc_score_job> jobs(static_cast<size_t>(heads));
  std::vector<int32_t> configured(static_cast<size_t>(heads));
  for (int32_t h = 0; h < heads; ++h) {
    const HeadStore& head = store(*selection.sequence, selection.layer, h);
    HeadInputs& in = inputs[static_cast<size_t>(h)];
    kvc_score_job& job = jobs[static_cast<size_t>(h)];
    std::vector<kvc_segment> segments;
    head.gather(segments, geometry_);
    job.seq_id = seq_id;
    job.layer = selection.layer;
    job.kv_head = h;
    job.n_tokens = head.length();
    job.head_dim = config_.head_dim;
    read_rows<int32_t>(segments, [](const kvc_segment& seg) { return seg.pos; }, in.positions);
    job.pos = in.positions.data();
    if (geometry_.stats & KVC_STAT_ATTN_SUM) {
      read_rows<float>(segments, [](const kvc_segment& seg) -> const float* { return seg.attn_sum; },
                       in.stats[0]);
      job.attn_sum = in.stats[0].data();
    }
    if (geometry_.stats & KVC_STAT_ATTN_LAST) {
      read_rows<float>(segments, [](const kvc_segment& seg) -> const float* { return seg.attn_last; },
                       in.stats[1]);
      job.attn_last = in.stats[1].data();
    }
    if (geometry_.stats & KVC_STAT_ATTN_WINDOW) {
      read_rows<float>(segments, [](const kvc_segment& seg) -> const float* { return seg.attn_window; },
                       in.stats[2]);
      job.attn_window = in.stats[2].data();
    }
    if (policy_->stats() & KVC_STAT_KEYS) {
      in.keys.resize(static_cast<size_t>(head.length()) * static_cast<size_t>(config_.head_dim));
      backend_.read_keys(segments, in.keys.data(), config_.head_dim, config_.dtype);
      job.keys = in.keys.data();
    }
    in.scores.assign(static_cast<size_t>(head.length()), 0.0f);
    job.scores = in.scores.data();
    configured[static_cast<size_t>(h)] = configured_budget(head);
    job.budget = configured[static_cast<size_t>(h)];
    job.sinks = policy_->config().sinks;
    job.recent = policy_->config().recent;
  }
  if (policy_->scores()) policy_->score(jobs.data(), jobs.size());

  kvc_budget_request request{};
  request.struct_size = sizeof(request);
  request.layer = selection.layer;
  request.n_layers = config_.layers;
  request.n_heads = heads;
  request.configured = configured.data();
  request.jobs = jobs.data();
  std::vector<int32_t> budgets(static_cast<size_t>(heads));
  policy_->budgets(request, budgets.data());

  const PolicyConfig& p = policy_->config();
  selection.kept.resize(static_cast<size_t>(heads));
  selection.budgets.resize(static_cast<size_t>(heads));
  for (size_t h = 0; h < static_cast<size_t>(heads); ++h) {
    selection.budgets[h] = std::max(budgets[h], 0);
    selection.kept[h] = select_kept(inputs[h].scores.data(), jobs[h].n_tokens,
                                    selection.budgets[h], p.sinks, p.recent);
  }
}

int32_t Cache::configured_budget(const HeadStore& head) const {
  const PolicyConfig& p = policy_->config();
  if (p.budget_ratio > 0.0) {
    double tokens = std::ceil(p.budget_ratio * static_cast<double>(head.seen()));
    return static_cast<int32_t>(std::min<double>(tokens, INT32_MAX));
  }
  return p.budget_tokens > 0 ? p.budget_tokens : INT32_MAX;
}

void Cache::compress(const std::vector<int32_t>& seq_ids, int32_t layer) {
  if (layer >= config_.layers) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "layer " + std::to_string(layer) +
                                              " is out of range 0.." +
                                              std::to_string(config_.layers - 1));
  }
  std::shared_lock<std::shared_mutex> lock(sequences_mutex_);
  std::vector<Sequence*> sequences;
  for (int32_t id : seq_ids) sequences.push_back(&find(id));
  if (layer < 0) {
    compress_locked(sequences, seq_ids, 0, config_.layers);
  } else {
    compress_locked(sequences, seq_ids, layer, layer + 1);
  }
}

void Cache::compress_locked(const std::vector<Sequence*>& sequences,
                            const std::vector<int32_t>& ids, int32_t first_layer,
                            int32_t end_layer) {
  if (!policy_ || sequences.empty()) return;
  const int32_t heads = config_.kv_heads;

  std::vector<LayerSelection> selections;
  std::vector<int32_t> selection_ids;
  for (size_t i = 0; i < sequences.size(); ++i) {
    for (int32_t layer = first_layer; layer < end_layer; ++layer) {
      bool over_budget = false;
      for (int32_t h = 0; h < heads; ++h) {
        const HeadStore& head = store(*sequences[i], layer, h);
        int32_t budget = configured_budget(head);
        if (head.effective_budget() >= 0) budget = std::min(budget, head.effective_budget());
        over_budget |= head.length() > budget;
      }
      if (!over_budget) continue;
      selections.push_back(LayerSelection{sequences[i], layer, {}, {}});
      selection_ids.push_back(ids[i]);
    }
  }

  // Decide every selection before touching storage: a policy error leaves the cache as it was.
  std::mutex error_mutex;
  std::exception_ptr first_error;
  context_.host().parallel_for(selections.size(), 1, [&](size_t begin, size_t end) {
    for (size_t s = begin; s < end; ++s) {
      try {
        select_layer(selections[s], selection_ids[s]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    }
  });
  if (first_error) std::rethrow_exception(first_error);

  std::vector<std::vector<kvc_segment>> segments;
  std::vector<kvc_compact_job> jobs;
  std::vector<std::pair<HeadStore*, int32_t>> changed;
  for (LayerSelection& selection : selections) {
    for (int32_t h = 0; h < heads; ++h) {
      HeadStore& head = store(*selection.sequence, selection.layer, h);
      head.set_effective_budget(selection.budgets[h]);
      const std::vector<int32_t>& kept = selection.kept[h];
      if (static_cast<int32_t>(kept.size()) == head.length()) continue;
      segments.emplace_back();
      head.gather(segments.back(), geometry_);
      jobs.push_back(kvc_compact_job{segments.back().data(),
                                     static_cast<int32_t>(segments.back().size()), kept.data(),
                                     static_cast<int32_t>(kept.size())});
      changed.emplace_back(&head, static_cast<int32_t>(kept.size()));
    }
  }
  backend_.compact(jobs, config_.head_dim, config_.dtype);
  for (auto& [head, kept] : changed) {
    uint64_t evicted = static_cast<uint64_t>(head->length() - kept);
    head->commit_compaction(kept, pool_, geometry_);
    tokens_stored_ -= evicted;
    tokens_evicted_ += evicted;
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
  std::shared_lock<std::shared_mutex> lock(sequences_mutex_);
  const HeadStore& head = store(find(seq_id), layer, kv_head);
  if (n_values != head.length()) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "n_values is " + std::to_string(n_values) +
                                              " but the head stores " +
                                              std::to_string(head.length()) + " tokens");
  }
  std::vector<float> merged;
  size_t at = 0;
  for (const Segment& s : head.segments()) {
    if (s.count == 0) break;
    float* target = segment_stat(s, geometry_, stat);
    const size_t bytes = sizeof(float) * static_cast<size_t>(s.count);
    const float* source = values + at;
    if (stat == KVC_STAT_ATTN_SUM) {
      merged.resize(static_cast<size_t>(s.count));
      backend_.copy(merged.data(), target, bytes, KVC_COPY_DEVICE_TO_HOST);
      for (int32_t i = 0; i < s.count; ++i) merged[i] += source[i];
      source = merged.data();
    }
    backend_.copy(target, source, bytes, KVC_COPY_HOST_TO_DEVICE);
    at += static_cast<size_t>(s.count);
  }
}

void Cache::compress_before_append(int32_t layer, const kvc_batch& batch,
                                   const ResolvedBatch& resolved) {
  if (!policy_ || policy_->config().prefill != PrefillCompression::once) return;
  std::vector<Sequence*> due;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < resolved.sequences.size(); ++i) {
    Sequence& seq = *resolved.sequences[i];
    if (batch.n_tokens[i] == 1 && seq.prefill_pending[layer]) {
      seq.prefill_pending[layer] = 0;
      due.push_back(&seq);
      ids.push_back(batch.seq_ids[i]);
    }
  }
  compress_locked(due, ids, layer, layer + 1);
}

void Cache::compress_after_attend(int32_t layer, const kvc_batch& batch,
                                  const ResolvedBatch& resolved) {
  if (!policy_) return;
  const PolicyConfig& p = policy_->config();
  std::vector<Sequence*> due;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < resolved.sequences.size(); ++i) {
    Sequence& seq = *resolved.sequences[i];
    bool compress_now = false;
    if (batch.n_tokens[i] > 1) {
      seq.prefill_pending[layer] = p.prefill == PrefillCompression::once;
      compress_now = p.prefill == PrefillCompression::per_chunk;
    } else {
      int32_t steps = ++seq.decode_steps[layer];
      compress_now = p.decode_every > 0 && steps >= p.decode_every;
      if (p.decode_slack > 0) {
        for (int32_t h = 0; h < config_.kv_heads && !compress_now; ++h) {
          const HeadStore& head = store(seq, layer, h);
          int32_t budget = head.effective_budget() >= 0 ? head.effective_budget()
                                                        : configured_budget(head);
          compress_now = head.length() > static_cast<int64_t>(budget) + p.decode_slack;
        }
      }
    }
    if (!compress_now) continue;
    seq.decode_steps[layer] = 0;
    due.push_back(&seq);
    ids.push_back(batch.seq_ids[i]);
  }
  compress_locked(due, ids, layer, layer + 1);
}

}  // namespace kvc
