// Compression of a cache's heads under its policy: on request, before an append (the "once"
// mode) and after an attention. Each is all or nothing, and the automatic ones can be undone
// when the append or attention around them fails. The caller holds the sequence table's lock.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "block_pool.hpp"
#include "cache_counters.hpp"
#include "config.hpp"
#include "context.hpp"
#include "head_memory.hpp"
#include "head_snapshot.hpp"
#include "head_storage.hpp"
#include "policy.hpp"
#include "schedule.hpp"
#include "selection.hpp"
#include "sequence_table.hpp"

namespace kvc {

class Compressor {
 public:
  // `policy` NULL: never compresses.
  Compressor(Context& context, const CacheConfig& config, const Policy* policy,
             const Schedule& schedule, const Geometry& geometry, Backend& backend,
             BlockPool& pool, const SequenceTable& sequences, HeadMemory& memory,
             CacheCounters& counters)
      : context_(context),
        config_(config),
        policy_(policy),
        schedule_(schedule),
        geometry_(geometry),
        backend_(backend),
        pool_(pool),
        sequences_(sequences),
        memory_(memory),
        counters_(counters) {}

  // Compresses layers [first_layer, end_layer) of the given sequences (ids[i] of
  // sequences[i]) where a head is over its budget.
  void compress(const std::vector<Sequence*>& sequences, const std::vector<int32_t>& ids,
                int32_t first_layer, int32_t end_layer, void* stream);

  // A head's tokens to keep (indices, ascending) and the position of the last of them, which
  // the caller read with the positions it chose them by.
  struct Compaction {
    HeadStorage* head;
    const std::vector<int32_t>* kept;
    int32_t newest_position;
  };
  // Moves the kept indices of each head to its front, copying shared segments it writes
  // first; returns the tokens removed. All or nothing.
  uint64_t compact_heads(const std::vector<Compaction>& heads, void* stream);

  // Whether storing the batch on `layer` runs a pending "once" compression first (false for a
  // batch that Cache::resolve would refuse).
  bool once_due(int32_t layer, const kvc_batch& batch) const;
  // The "once" compression an append runs first, open until the append succeeded: the compressed
  // layer's heads as they were, so that an append failing after it (out of memory, the backend,
  // the attention, a later compression) leaves them as they were. It needs the cache
  // exclusively: putting the heads back takes the memory the compression freed.
  struct OnceCompression {
    std::vector<Sequence*> sequences;
    std::vector<std::pair<HeadStorage*, HeadSnapshot>> heads;
    uint64_t tokens_stored = 0, tokens_evicted = 0, tokens_demoted = 0, bytes_copied = 0;  // before it
  };
  OnceCompression compress_before_append(int32_t layer, const kvc_batch& batch,
                                         const ResolvedBatch& resolved);
  void commit(OnceCompression& once, int32_t layer);
  void roll_back(OnceCompression& once);

  // The compressions an attention makes due, decided before it runs (it changes no length):
  // the triggers' state after it, written back once those compressions succeeded, and the
  // statistics of the due heads that it is about to add to, put back if one fails.
  struct AfterAttend {
    std::vector<TriggerState> triggers;  // [batch sequence]
    std::vector<Sequence*> due;
    std::vector<int32_t> ids;
    std::vector<std::pair<const HeadStorage*, std::vector<unsigned char>>> stats;
  };
  AfterAttend plan_after_attend(int32_t layer, const kvc_batch& batch,
                                const ResolvedBatch& resolved);
  void compress_after_attend(int32_t layer, const ResolvedBatch& resolved, AfterAttend& plan,
                             void* stream);

 private:
  struct LayerSelection;
  // Policy.demote: the fate of each token of head h of the selection, in position order.
  std::vector<Fate> select_fates(const LayerSelection& sel, size_t h,
                                 const kvc_score_job& job) const;
  // Rewrites the heads whose tokens' fates change anything (head_rebuild.hpp).
  void apply_fates(const std::vector<LayerSelection>& selections, void* stream);
  // Without demotion: compacts the heads that lose tokens.
  void apply_kept(const std::vector<LayerSelection>& selections, void* stream);
  // How far a head is over its budget, in tokens of the cache's formats (<= 0: within it);
  // with policy.demote the budget is that many tokens' bytes.
  int64_t excess(const HeadStorage& head) const;

  // Whether the engine marked sequence i's tokens of the batch as its prompt's last chunk.
  static bool marks_prompt_end(const kvc_batch& batch, size_t i) {
    return batch.prompt_end != nullptr && batch.prompt_end[i] != 0;
  }
  int32_t head_budget(const HeadStorage& head) const {
    return schedule_.budget(head.seen(), head.effective_budget());
  }

  Context& context_;
  const CacheConfig& config_;
  const Policy* policy_;
  const Schedule& schedule_;
  const Geometry& geometry_;
  Backend& backend_;
  BlockPool& pool_;
  const SequenceTable& sequences_;
  HeadMemory& memory_;
  CacheCounters& counters_;
};

}  // namespace kvc
