// The prefix cache of one paged cache: its findable full blocks, each a node keyed by its
// prefix chunk key (prefix_keys.hpp, chunk_tokens = block_tokens) under its parent, the block
// before it. A node holds one block per (layer, KV head) through BlockPool::hold(), so the
// blocks outlive the sequences that wrote them; reclaim() gives them back, least recently used
// leaves first. A lookup compares each node's token ids and parent, so a key collision never
// matches another prompt. Thread-safe; lock order: the cache's sequence locks, then this, then
// the pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "block_pool.hpp"

namespace kvc {

// One block of a prompt: its key and its block_tokens token ids.
struct PrefixLink {
  std::string key;
  const int32_t* tokens;
};

struct PrefixIndexCounters {
  uint64_t hits = 0;           // attaches that got at least one block
  uint64_t tokens_reused = 0;  // tokens those attaches got
  uint64_t bytes_reclaimed = 0;
};

class PrefixIndex {
 public:
  PrefixIndex(BlockPool& pool, int32_t block_tokens);
  // Lets go of every block.
  ~PrefixIndex();
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  // The number of links, from the first, that are findable; marks them used.
  size_t match(const std::vector<PrefixLink>& links);
  // The blocks ([link][head]) of the findable run of links from the first, each with one more
  // owner (BlockPool::share) for a new sequence; marks them used.
  std::vector<std::vector<void*>> attach(const std::vector<PrefixLink>& links);
  // Counts an attach that gave a sequence `blocks` blocks (from the index or a store).
  void count_attach(size_t blocks);
  // Makes links[j] findable with blocks[j] ([head], full blocks a sequence holds), for each
  // j < blocks.size() <= links.size() in turn; a link already findable keeps its blocks. Stops
  // at a key that another prompt's block holds. Returns the links findable from the first.
  size_t publish(const std::vector<PrefixLink>& links,
                 const std::vector<std::vector<void*>>& blocks);
  // Gives back cached blocks until `bytes` were freed or none is left: least recently used
  // leaves first, those with blocks that only the index holds before the others. Returns
  // whether it freed any.
  bool reclaim(size_t bytes);
  // Lets go of these blocks, which a sequence is about to write: removes the nodes holding
  // one, and the nodes under them, which no lookup reaches without them.
  void drop(const std::vector<const void*>& blocks);

  PrefixIndexCounters counters() const;

 private:
  struct Node {
    Node* parent;
    std::vector<int32_t> tokens;
    std::vector<void*> blocks;  // [head]
    uint32_t children = 0;
    uint64_t last_used = 0;
  };
  // The node of `link` under `parent`, or NULL (a collision is no match).
  Node* find_locked(const PrefixLink& link, const Node* parent) const;
  // The findable run from the first link, each node marked used.
  std::vector<Node*> match_locked(const std::vector<PrefixLink>& links);
  // The least recently used leaf, among those with a block only the index holds when
  // `only_cached`; NULL when none.
  std::string victim_locked(bool only_cached) const;
  // Removes a leaf, letting go of its blocks; returns the bytes freed.
  size_t evict_locked(const std::string& key);

  BlockPool& pool_;
  const int32_t block_tokens_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<Node>> nodes_;
  uint64_t clock_ = 0;
  PrefixIndexCounters counters_;
};

}  // namespace kvc
