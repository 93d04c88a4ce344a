// The compression driver: read what the policy needs of every due (sequence, layer) in one
// batched backend call, ask the policy for scores and budgets, pick the kept tokens, compact
// storage in one backend call and return emptied blocks.
#include "compressor.hpp"

#include <algorithm>
#include <exception>
#include <numeric>
#include <mutex>

#include "head_rebuild.hpp"
#include "kvcache/kvcache_error.hpp"
#include "selection.hpp"

namespace kvc {
namespace {

// Host copies of what a policy reads about one (sequence, layer, KV head), in position order:
// a head with a demoted tier stores its tokens in another order, which `order` maps to.
struct HeadInputs {
  std::vector<int32_t> order;  // [token] its storage index; empty: the same
  std::vector<int32_t> positions;
  std::vector<float> stats[std::size(kStoredStats)];
  std::vector<float> keys;
  std::vector<float> scores;
};

}  // namespace

// One (sequence, layer) to compress: its inputs, then what each KV head keeps.
struct Compressor::LayerSelection {
  Sequence* sequence;
  int32_t seq_id;
  int32_t layer;
  std::vector<HeadInputs> inputs;          // [kv_head]
  std::vector<std::vector<int32_t>> kept;  // [kv_head]
  std::vector<std::vector<Fate>> fates;    // [kv_head] with policy.demote, instead of kept
  std::vector<int32_t> budgets;            // [kv_head] what the policy gave each head
};

namespace {

// Puts the inputs read in storage order into position order: the demoted tier's tokens, then
// the others, each already in position order, merged.
void to_position_order(const HeadStorage& head, size_t head_dim, HeadInputs& in) {
  const int32_t demoted = head.demoted_length();
  if (demoted == 0) return;
  const std::vector<int32_t> stored = in.positions;
  in.order.resize(stored.size());
  std::iota(in.order.begin(), in.order.end(), 0);
  std::inplace_merge(in.order.begin(), in.order.begin() + demoted, in.order.end(),
                     [&](int32_t a, int32_t b) { return stored[size_t(a)] < stored[size_t(b)]; });
  auto permute = [&](auto& values, size_t width) {
    if (values.empty()) return;
    const auto copy = values;
    for (size_t i = 0; i < in.order.size(); ++i) {
      std::copy_n(copy.begin() + static_cast<std::ptrdiff_t>(size_t(in.order[i]) * width), width,
                  values.begin() + static_cast<std::ptrdiff_t>(i * width));
    }
  };
  permute(in.positions, 1);
  for (std::vector<float>& stat : in.stats) permute(stat, 1);
  permute(in.keys, head_dim);
}

}  // namespace

int64_t Compressor::excess(const HeadStorage& head) const {
  const int64_t budget = head_budget(head);
  if (!geometry_.demotes()) return int64_t{head.length()} - budget;
  // In tokens of the cache's formats, rounded up: a head over its bytes by any amount is over.
  const int64_t keep_cost = static_cast<int64_t>(geometry_.budget_token_bytes(0));
  const int64_t bytes = int64_t{head.length() - head.demoted_length()} * keep_cost +
                        int64_t{head.demoted_length()} * static_cast<int64_t>(geometry_.budget_token_bytes(1));
  const int64_t over = bytes - budget * keep_cost;
  return over > 0 ? (over + keep_cost - 1) / keep_cost : over / keep_cost;
}

void Compressor::compress(const std::vector<Sequence*>& sequences,
                          const std::vector<int32_t>& ids, int32_t first_layer,
                          int32_t end_layer, void* stream) {
  if (!policy_ || sequences.empty()) return;
  const int32_t heads = config_.kv_heads;
  const size_t n_heads = static_cast<size_t>(heads);

  std::vector<LayerSelection> selections;
  for (size_t i = 0; i < sequences.size(); ++i) {
    for (int32_t layer = first_layer; layer < end_layer; ++layer) {
      bool over_budget = false;
      for (int32_t h = 0; h < heads && !over_budget; ++h) {
        over_budget = excess(sequences_.head(*sequences[i], layer, h)) > 0;
      }
      if (over_budget) selections.push_back(LayerSelection{sequences[i], ids[i], layer, {}, {}, {}, {}});
    }
  }
  if (selections.empty()) return;

  // Everything the policy reads, for every selected head, in one call of each kind.
  const bool keys = policy_->stats() & KVC_STAT_KEYS;
  size_t total_segments = 0;
  for (const LayerSelection& sel : selections) {
    for (int32_t h = 0; h < heads; ++h) total_segments += sequences_.head(*sel.sequence, sel.layer, h).segments().size();
  }
  std::vector<kvc_segment> segments;
  segments.reserve(total_segments);  // jobs point into it: it must not reallocate
  std::vector<kvc_read_tokens_job> reads;
  std::vector<kvc_read_keys_job> key_reads;
  reads.reserve(selections.size() * n_heads);
  for (LayerSelection& sel : selections) {
    sel.inputs.resize(n_heads);
    for (int32_t h = 0; h < heads; ++h) {
      const HeadStorage& head = sequences_.head(*sel.sequence, sel.layer, h);
      HeadInputs& in = sel.inputs[static_cast<size_t>(h)];
      const size_t n = static_cast<size_t>(head.length());
      const size_t first = segments.size();
      head.gather(segments, geometry_);
      kvc_read_tokens_job job{};
      job.struct_size = sizeof(job);
      job.n_segments = static_cast<int32_t>(segments.size() - first);
      job.segments = segments.data() + first;
      job.stats = head.stats(geometry_);
      in.positions.resize(n);
      job.out_pos = in.positions.data();
      float** outs[] = {&job.out_attn_sum, &job.out_attn_last, &job.out_attn_window};
      for (size_t s = 0; s < std::size(kStoredStats); ++s) {
        if (!(geometry_.stats & kStoredStats[s])) continue;
        in.stats[s].resize(n);
        *outs[s] = in.stats[s].data();
      }
      reads.push_back(job);
      if (keys) {
        in.keys.resize(n * static_cast<size_t>(config_.head_dim));
        key_reads.push_back(kvc_read_keys_job{sizeof(kvc_read_keys_job), job.n_segments,
                                              job.segments, in.keys.data()});
      }
    }
  }
  backend_.read_tokens(reads, stream);
  backend_.read_keys(key_reads, stream);
  for (LayerSelection& sel : selections) {
    for (int32_t h = 0; h < heads; ++h) {
      to_position_order(sequences_.head(*sel.sequence, sel.layer, h),
                        static_cast<size_t>(config_.head_dim), sel.inputs[static_cast<size_t>(h)]);
    }
  }

  // Decide every selection before touching storage: a policy error leaves the cache as it was.
  std::mutex error_mutex;
  std::exception_ptr first_error;
  context_.host().parallel_for(selections.size(), 1, [&](size_t begin, size_t end) {
    for (size_t s = begin; s < end; ++s) {
      try {
        LayerSelection& sel = selections[s];
        std::vector<kvc_score_job> jobs(n_heads);
        std::vector<int32_t> configured(n_heads);
        for (size_t h = 0; h < n_heads; ++h) {
          const HeadStorage& head = sequences_.head(*sel.sequence, sel.layer, static_cast<int32_t>(h));
          HeadInputs& in = sel.inputs[h];
          kvc_score_job& job = jobs[h];
          const ProtectedRange range = schedule_.protected_range(head.length());
          job.struct_size = sizeof(job);
          job.seq_id = sel.seq_id;
          job.layer = sel.layer;
          job.kv_head = static_cast<int32_t>(h);
          job.n_tokens = head.length();
          job.pos = in.positions.data();
          job.attn_sum = in.stats[0].empty() ? nullptr : in.stats[0].data();
          job.attn_last = in.stats[1].empty() ? nullptr : in.stats[1].data();
          job.attn_window = in.stats[2].empty() ? nullptr : in.stats[2].data();
          job.keys = in.keys.empty() ? nullptr : in.keys.data();
          job.head_dim = config_.head_dim;
          configured[h] = schedule_.configured_budget(head.seen());
          job.budget = configured[h];
          job.sinks = policy_->config().sinks;
          job.recent = policy_->config().recent;
          in.scores.assign(static_cast<size_t>(head.length()), 0.0f);
          job.scores = in.scores.data();
          job.sink_end = range.sink_end;
          job.recent_begin = range.recent_begin;
        }
        if (policy_->scores()) policy_->score(jobs.data(), jobs.size());

        kvc_budget_request request{};
        request.struct_size = sizeof(request);
        request.layer = sel.layer;
        request.n_layers = config_.layers;
        request.n_heads = heads;
        request.configured = configured.data();
        request.jobs = jobs.data();
        sel.budgets.resize(n_heads);
        policy_->budgets(request, sel.budgets.data());
        for (size_t h = 0; h < n_heads; ++h) sel.budgets[h] = std::max(sel.budgets[h], 0);
        if (geometry_.demotes()) {
          sel.fates.resize(n_heads);
          for (size_t h = 0; h < n_heads; ++h) sel.fates[h] = select_fates(sel, h, jobs[h]);
        } else {
          sel.kept.resize(n_heads);
          for (size_t h = 0; h < n_heads; ++h) {
            sel.kept[h] = select_kept(sel.inputs[h].scores.data(), jobs[h].n_tokens,
                                      sel.budgets[h], {jobs[h].sink_end, jobs[h].recent_begin});
          }
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    }
  });
  if (first_error) std::rethrow_exception(first_error);
  if (geometry_.demotes()) {
    apply_fates(selections, stream);
  } else {
    apply_kept(selections, stream);
  }
  for (LayerSelection& sel : selections) {
    for (int32_t h = 0; h < heads; ++h) {
      sequences_.head(*sel.sequence, sel.layer, h).set_effective_budget(sel.budgets[static_cast<size_t>(h)]);
    }
  }
}

std::vector<Fate> Compressor::select_fates(const LayerSelection& sel, size_t h,
                                           const kvc_score_job& job) const {
  const HeadInputs& in = sel.inputs[h];
  const int32_t demoted_length =
      sequences_.head(*sel.sequence, sel.layer, static_cast<int32_t>(h)).demoted_length();
  std::vector<uint8_t> demoted(static_cast<size_t>(job.n_tokens));
  for (size_t i = 0; i < demoted.size(); ++i) {
    demoted[i] = (in.order.empty() ? static_cast<int32_t>(i) : in.order[i]) < demoted_length;
  }
  const TierCosts costs{geometry_.budget_token_bytes(0), geometry_.budget_token_bytes(1)};
  const size_t budget_bytes = static_cast<size_t>(sel.budgets[h]) * costs.keep;
  const size_t keep_bytes = keep_share_bytes(policy_->config().demote.keep, budget_bytes);
  return select_tiers(in.scores.data(), demoted.data(), job.n_tokens, budget_bytes, keep_bytes,
                      costs, {job.sink_end, job.recent_begin});
}

void Compressor::apply_fates(const std::vector<LayerSelection>& selections, void* stream) {
  std::vector<TierPlan> plans;
  uint64_t evicted = 0, demoted = 0;
  for (const LayerSelection& sel : selections) {
    for (size_t h = 0; h < sel.fates.size(); ++h) {
      HeadStorage& head = sequences_.head(*sel.sequence, sel.layer, static_cast<int32_t>(h));
      const HeadInputs& in = sel.inputs[h];
      TierPlan plan{&head, {}, {}, &in.order, &in.positions, in.stats};
      for (size_t i = 0; i < sel.fates[h].size(); ++i) {
        const Fate fate = sel.fates[h][i];
        if (fate == Fate::keep) plan.kept.push_back(static_cast<int32_t>(i));
        if (fate == Fate::demote) plan.demoted.push_back(static_cast<int32_t>(i));
      }
      const size_t removed = static_cast<size_t>(head.length()) - plan.kept.size() - plan.demoted.size();
      size_t newly_demoted = 0;
      for (int32_t token : plan.demoted) {
        const int32_t stored = in.order.empty() ? token : in.order[static_cast<size_t>(token)];
        newly_demoted += stored >= head.demoted_length() ? 1 : 0;
      }
      if (removed == 0 && newly_demoted == 0) continue;
      evicted += removed;
      demoted += newly_demoted;
      plans.push_back(std::move(plan));
    }
  }
  rebuild_heads(plans, backend_, pool_, geometry_, stream);
  counters_.tokens_stored -= evicted;
  counters_.tokens_evicted += evicted;
  counters_.tokens_demoted += demoted;
  std::vector<HeadStorage*> rebuilt;
  for (const TierPlan& plan : plans) rebuilt.push_back(plan.head);
  memory_.release_unused_capacity(rebuilt);
}

void Compressor::apply_kept(const std::vector<LayerSelection>& selections, void* stream) {
  const int32_t heads = config_.kv_heads;
  std::vector<Compaction> changed;
  for (const LayerSelection& sel : selections) {
    for (int32_t h = 0; h < heads; ++h) {
      HeadStorage& head = sequences_.head(*sel.sequence, sel.layer, h);
      const std::vector<int32_t>& kept = sel.kept[static_cast<size_t>(h)];
      if (static_cast<int32_t>(kept.size()) == head.length()) continue;
      const std::vector<int32_t>& positions = sel.inputs[static_cast<size_t>(h)].positions;
      changed.push_back(Compaction{
          &head, &kept, kept.empty() ? -1 : positions[static_cast<size_t>(kept.back())]});
    }
  }
  const uint64_t evicted = compact_heads(changed, stream);
  counters_.tokens_evicted += evicted;
  std::vector<HeadStorage*> compacted;
  for (const Compaction& c : changed) compacted.push_back(c.head);
  memory_.release_unused_capacity(compacted);
}

uint64_t Compressor::compact_heads(const std::vector<Compaction>& heads, void* stream) {
  // Compaction writes each head's token slots from its first moved token on: segments there
  // that forked sequences share are copied first, with all memory taken before anything moves.
  std::vector<SlotWrite> writes;
  for (const auto& [head, kept, newest] : heads) {
    int32_t first = 0;
    const int32_t n_keep = static_cast<int32_t>(kept->size());
    while (first < n_keep && (*kept)[static_cast<size_t>(first)] == first) ++first;
    if (first < n_keep) writes.push_back(SlotWrite{head, first, n_keep});
  }
  const Replacements unshared = memory_.unshare_slots(writes, stream);

  std::vector<kvc_segment> segments;
  size_t total_segments = 0;
  for (const Compaction& c : heads) total_segments += c.head->segments().size();
  segments.reserve(total_segments);  // jobs point into it: it must not reallocate
  std::vector<kvc_compact_job> jobs;
  jobs.reserve(heads.size());
  for (const auto& [head, kept, newest] : heads) {
    const size_t first = segments.size();
    head->gather(segments, geometry_);
    jobs.push_back(kvc_compact_job{sizeof(kvc_compact_job),
                                   static_cast<int32_t>(segments.size() - first),
                                   segments.data() + first, kept->data(),
                                   static_cast<int32_t>(kept->size()), head->stats(geometry_)});
  }
  try {
    backend_.compact(jobs, stream);
  } catch (...) {
    memory_.undo(unshared);
    throw;
  }
  memory_.keep(unshared);
  uint64_t removed = 0;
  for (const auto& [head, kept, newest] : heads) {
    removed += static_cast<uint64_t>(head->length() - static_cast<int32_t>(kept->size()));
    head->commit_compaction(static_cast<int32_t>(kept->size()), newest, pool_, geometry_);
  }
  counters_.tokens_stored -= removed;
  return removed;
}

bool Compressor::once_due(int32_t layer, const kvc_batch& batch) const {
  // A cache without the "once" mode looks up no sequence here.
  if (!policy_ || policy_->config().prefill != PrefillCompression::once || layer < 0 ||
      layer >= config_.layers || batch.n_seqs < 1 || !batch.seq_ids || !batch.n_tokens) {
    return false;
  }
  for (int32_t i = 0; i < batch.n_seqs; ++i) {
    const Sequence* found = sequences_.lookup(batch.seq_ids[i]);
    if (!found || batch.n_tokens[i] < 1) return false;
    if (schedule_.before_append(found->triggers[static_cast<size_t>(layer)],
                                batch.n_tokens[i], marks_prompt_end(batch, static_cast<size_t>(i)))) {
      return true;
    }
  }
  return false;
}

Compressor::OnceCompression Compressor::compress_before_append(int32_t layer,
                                                               const kvc_batch& batch,
                                                               const ResolvedBatch& resolved) {
  OnceCompression once;
  if (!policy_) return once;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < resolved.sequences.size(); ++i) {
    Sequence& seq = *resolved.sequences[i];
    if (!schedule_.before_append(seq.triggers[static_cast<size_t>(layer)], batch.n_tokens[i],
                                 marks_prompt_end(batch, i))) {
      continue;
    }
    once.sequences.push_back(&seq);
    ids.push_back(batch.seq_ids[i]);
  }
  if (once.sequences.empty()) return once;
  once.tokens_stored = counters_.tokens_stored;
  once.tokens_evicted = counters_.tokens_evicted;
  once.tokens_demoted = counters_.tokens_demoted;
  once.bytes_copied = counters_.bytes_copied;
  try {
    for (Sequence* seq : once.sequences) {
      for (int32_t h = 0; h < config_.kv_heads; ++h) {
        HeadStorage& head = sequences_.head(*seq, layer, h);
        once.heads.emplace_back(&head, capture_head(head, backend_, pool_, geometry_));
      }
    }
    compress(once.sequences, ids, layer, layer + 1, batch.stream);
  } catch (...) {
    // The compression changes nothing when it fails; the snapshots are not needed.
    for (auto& entry : once.heads) release_snapshot(entry.second, pool_, geometry_);
    throw;
  }
  return once;
}

void Compressor::commit(OnceCompression& once, int32_t layer) {
  for (Sequence* seq : once.sequences) seq->triggers[static_cast<size_t>(layer)].prefill_pending = false;
  for (auto& entry : once.heads) release_snapshot(entry.second, pool_, geometry_);
}

void Compressor::roll_back(OnceCompression& once) {
  for (auto& [head, snapshot] : once.heads) {
    try {
      restore_head(*head, snapshot, backend_, pool_, geometry_);
    } catch (const std::exception& e) {
      // Only a backend that fails its copies gets here: the head is left empty.
      context_.logger().log(KVC_LOG_ERROR,
                            std::string("could not put back a head after a failed append: ") + e.what());
      release_snapshot(snapshot, pool_, geometry_);
    }
  }
  if (once.sequences.empty()) return;
  counters_.tokens_stored = once.tokens_stored;
  counters_.tokens_evicted = once.tokens_evicted;
  counters_.tokens_demoted = once.tokens_demoted;
  counters_.bytes_copied = once.bytes_copied;
}

Compressor::AfterAttend Compressor::plan_after_attend(int32_t layer, const kvc_batch& batch,
                                                      const ResolvedBatch& resolved) {
  AfterAttend plan;
  if (!policy_) return plan;
  for (size_t i = 0; i < resolved.sequences.size(); ++i) {
    Sequence& seq = *resolved.sequences[i];
    auto most_excess = [&] {
      int64_t most = INT64_MIN;
      for (int32_t h = 0; h < config_.kv_heads; ++h) {
        most = std::max<int64_t>(most, excess(sequences_.head(seq, layer, h)));
      }
      return most;
    };
    plan.triggers.push_back(seq.triggers[static_cast<size_t>(layer)]);
    if (!schedule_.after_attend(plan.triggers.back(), batch.n_tokens[i],
                                marks_prompt_end(batch, i), most_excess)) {
      continue;
    }
    plan.due.push_back(&seq);
    plan.ids.push_back(batch.seq_ids[i]);
    for (int32_t h = 0; h < config_.kv_heads; ++h) {
      const HeadStorage& head = sequences_.head(seq, layer, h);
      if (!head.stats_array()) continue;
      std::vector<unsigned char> bytes(geometry_.stats_bytes_for(head.stats_capacity()));
      backend_.copy(bytes.data(), head.stats_array(), bytes.size(), KVC_COPY_DEVICE_TO_HOST);
      plan.stats.emplace_back(&head, std::move(bytes));
    }
  }
  return plan;
}

void Compressor::compress_after_attend(int32_t layer, const ResolvedBatch& resolved,
                                       AfterAttend& plan, void* stream) {
  if (!policy_) return;
  try {
    compress(plan.due, plan.ids, layer, layer + 1, stream);
  } catch (...) {
    // The compression left storage as it was; take back what the attention added.
    for (const auto& [head, bytes] : plan.stats) {
      backend_.copy(head->stats_array(), bytes.data(), bytes.size(),
                    KVC_COPY_HOST_TO_DEVICE);
    }
    throw;
  }
  for (size_t i = 0; i < resolved.sequences.size(); ++i) {
    resolved.sequences[i]->triggers[static_cast<size_t>(layer)] = plan.triggers[i];
  }
}

}  // namespace kvc
