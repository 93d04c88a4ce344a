// The prefix cache of a cache (kvcache.h, "prefix cache"): sequences attached to findable
// blocks, blocks published, lookups, and the prefix store behind them.
#include <algorithm>
#include <mutex>

#include "cache.hpp"
#include "kvcache/kvcache_error.hpp"
#include "prefix_chunks.hpp"
#include "prefix_transfer.hpp"
#include "stored_image.hpp"

namespace kvc {
namespace {

// Drops a new sequence's owner of blocks ([block][head]) it was to be made of.
void give_back(BlockPool& pool, const std::vector<std::vector<void*>>& blocks) {
  for (const std::vector<void*>& run : blocks) {
    for (void* block : run) pool.give_back_block(block);
  }
}

}  // namespace

PrefixIdentity Cache::prefix_identity(const std::string& model, int32_t chunk_tokens) const {
  const CacheConfig& c = config_;
  return {model,     c.layers,     c.kv_heads,      c.q_heads,     c.head_dim,
          c.k_dtype, c.v_dtype,    c.k_rotation,    geometry_.stats, chunk_tokens};
}

PrefixIndex& Cache::prefix_index() const {
  if (!prefix_index_) {
    throw Error(KVC_ERR_UNSUPPORTED,
                "this cache has no prefix cache: create it with prefix_cache enabled "
                "(kvc_cache_params::prefix_cache, YAML prefix_cache.enabled)");
  }
  return *prefix_index_;
}

std::vector<PrefixLink> Cache::prefix_links(const PrefixRequest& prefix,
                                            size_t max_blocks) const {
  const int32_t block = config_.block_tokens;
  const size_t n = std::min(static_cast<size_t>(prefix.n_tokens / block), max_blocks);
  PrefixKeys keys(prefix_identity(prefix.model, block), prefix.token_ids);
  std::vector<PrefixLink> links;
  links.reserve(n);
  for (size_t j = 0; j < n; ++j) {
    links.push_back(PrefixLink{keys.next(), prefix.token_ids + j * static_cast<size_t>(block)});
  }
  return links;
}

int32_t Cache::lookup_prefix(const PrefixRequest& prefix) {
  PrefixIndex& index = prefix_index();
  return static_cast<int32_t>(index.match(prefix_links(prefix, SIZE_MAX))) * config_.block_tokens;
}

std::vector<Cache::LoadedChunk> Cache::load_prefix_chunks(const std::vector<PrefixLink>& links,
                                                          size_t first,
                                                          const std::string& model) const {
  std::vector<LoadedChunk> chunks;
  if (config_.prefix_cache.store.empty()) return chunks;
  const Store& store = context_.store(config_.prefix_cache.store);
  const PrefixIdentity identity = prefix_identity(model, config_.block_tokens);
  for (size_t j = first; j < links.size(); ++j) {
    StoredValue bytes;
    try {
      bytes = store.get(links[j].key);
    } catch (const Error& e) {
      if (e.code() == KVC_ERR_NOT_FOUND) break;
      throw;
    }
    // The image's rows may stay in the bytes, whose buffer moves along with them.
    SequenceImage image = decode_value(bytes, store, links[j].key);
    check_chunk(image, identity, static_cast<int32_t>(j), links[j].key);
    chunks.push_back(LoadedChunk{std::move(bytes), std::move(image)});
  }
  return chunks;
}

std::vector<std::vector<void*>> Cache::store_prefix_chunks(
    const std::vector<LoadedChunk>& chunks) {
  const size_t heads = static_cast<size_t>(config_.layers) * config_.kv_heads;
  const std::vector<void*> taken = pool_.take_blocks(chunks.size() * heads);
  const size_t n = static_cast<size_t>(config_.block_tokens);
  std::vector<std::vector<void*>> blocks(chunks.size());
  try {
    for (size_t c = 0; c < chunks.size(); ++c) {
      blocks[c].assign(taken.begin() + static_cast<std::ptrdiff_t>(c * heads),
                       taken.begin() + static_cast<std::ptrdiff_t>((c + 1) * heads));
      for (size_t h = 0; h < heads; ++h) {
        const HeadImage& rows = chunks[c].image.heads[h];
        const Segment block{static_cast<unsigned char*>(blocks[c][h]), config_.block_tokens, 0};
        backend_.copy(segment_k(block), rows.k_rows(), n * geometry_.rows().k_row_bytes,
                      KVC_COPY_HOST_TO_DEVICE);
        backend_.copy(segment_v(block, geometry_), rows.v_rows(), n * geometry_.rows().v_row_bytes,
                      KVC_COPY_HOST_TO_DEVICE);
        backend_.copy(segment_pos(block, geometry_), rows.positions.data(), n * sizeof(int32_t),
                      KVC_COPY_HOST_TO_DEVICE);
      }
    }
  } catch (...) {
    for (void* block : taken) pool_.give_back_block(block);
    throw;
  }
  return blocks;
}

std::unique_ptr<Sequence> Cache::sequence_of_blocks(const std::vector<std::vector<void*>>& blocks) {
  const size_t heads = static_cast<size_t>(config_.layers) * config_.kv_heads;
  const int32_t block = config_.block_tokens;
  const int32_t tokens = static_cast<int32_t>(blocks.size()) * block;
  auto sequence = std::make_unique<Sequence>();
  sequence->heads.resize(heads);
  // As after a prompt chunk: a "once" compression is pending (only such a policy reads it).
  sequence->triggers.assign(static_cast<size_t>(config_.layers), TriggerState{0, tokens > 0});
  std::vector<void*> stats;
  try {
    if (geometry_.stat_count() > 0 && tokens > 0) {
      const size_t bytes = geometry_.stats_bytes_for(tokens);
      stats = pool_.allocate(std::vector<size_t>(heads, bytes));
      const std::vector<unsigned char> zeros(bytes, 0);
      for (void* array : stats) {
        backend_.copy(array, zeros.data(), bytes, KVC_COPY_HOST_TO_DEVICE);
      }
    }
  } catch (...) {
    for (size_t h = 0; h < stats.size(); ++h) {
      pool_.release(stats[h], geometry_.stats_bytes_for(tokens));
    }
    give_back(pool_, blocks);
    throw;
  }
  for (size_t h = 0; h < heads; ++h) {
    std::vector<Segment> segments;
    for (const std::vector<void*>& run : blocks) {
      segments.push_back(Segment{static_cast<unsigned char*>(run[h]), block, block});
    }
    sequence->heads[h].adopt(std::move(segments),
                             stats.empty() ? nullptr : static_cast<float*>(stats[h]),
                             stats.empty() ? 0 : tokens, tokens, tokens - 1, tokens, -1);
  }
  return sequence;
}

int32_t Cache::attach_prefix(int32_t seq_id, const PrefixRequest& prefix) {
  PrefixIndex& index = prefix_index();
  sequences_.check_new_id(seq_id);
  const std::vector<PrefixLink> links = prefix_links(prefix, SIZE_MAX);
  // The store is asked outside the cache's locks, for the chunks past those cached now.
  const size_t cached = index.match(links);
  const std::vector<LoadedChunk> loaded = load_prefix_chunks(links, cached, prefix.model);

  std::unique_lock<std::shared_mutex> lock(sequences_.mutex());
  sequences_.require_unused(seq_id);
  std::vector<std::vector<void*>> blocks = index.attach(links);
  // Loaded chunks continue the attached run only where it still ends where they start.
  if (blocks.size() == cached && !loaded.empty()) {
    std::vector<std::vector<void*>> more;
    try {
      more = store_prefix_chunks(loaded);
    } catch (...) {
      give_back(pool_, blocks);
      throw;
    }
    blocks.insert(blocks.end(), more.begin(), more.end());
    index.publish(links, blocks);
  }
  std::unique_ptr<Sequence> sequence = sequence_of_blocks(blocks);
  sequences_.add(seq_id, std::move(sequence));
  index.count_attach(blocks.size());
  return static_cast<int32_t>(blocks.size()) * config_.block_tokens;
}

int32_t Cache::in_order_tokens(const HeadStorage& head) {
  // A demoted tier comes first in storage, in blocks of another format: none is a prefix.
  if (head.demoted_length() > 0) return 0;
  // Positions increase strictly along a head, so ending at length - 1 means 0, 1, ... in order.
  if (head.newest_position() == head.length() - 1) return head.length();
  std::vector<kvc_segment> segments;
  head.gather(segments, geometry_);
  std::vector<int32_t> positions(static_cast<size_t>(head.length()));
  kvc_read_tokens_job job{};
  job.struct_size = sizeof(job);
  job.n_segments = static_cast<int32_t>(segments.size());
  job.segments = segments.data();
  job.out_pos = positions.data();
  backend_.read_tokens({job}, nullptr);
  int32_t n = 0;
  while (n < head.length() && positions[static_cast<size_t>(n)] == n) ++n;
  return n;
}

int32_t Cache::publish_prefix(int32_t seq_id, const PrefixRequest& prefix) {
  PrefixIndex& index = prefix_index();
  const int32_t block = config_.block_tokens;
  int32_t tokens = 0;
  {
    std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
    Sequence& sequence = sequences_.find(seq_id);
    const auto sequence_lock = SequenceTable::lock_sequence(sequence, false);
    int32_t whole = prefix.n_tokens / block;
    for (const HeadStorage& head : sequence.heads) {
      whole = std::min(whole, in_order_tokens(head) / block);
    }
    const std::vector<PrefixLink> links = prefix_links(prefix, static_cast<size_t>(whole));
    std::vector<std::vector<void*>> blocks(links.size());
    for (size_t j = 0; j < links.size(); ++j) {
      for (const HeadStorage& head : sequence.heads) blocks[j].push_back(head.segments()[j].base);
    }
    tokens = static_cast<int32_t>(index.publish(links, blocks)) * block;
  }
  const PrefixCacheConfig& c = config_.prefix_cache;
  if (c.write_through && tokens > 0) {
    save_prefix(*this, seq_id, c.store, PrefixRequest{prefix.model, prefix.token_ids, tokens, block});
  }
  return tokens;
}

}  // namespace kvc
