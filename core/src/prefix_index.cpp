#include "prefix_index.hpp"

#include <algorithm>

namespace kvc {

PrefixIndex::PrefixIndex(BlockPool& pool, int32_t block_tokens)
    : pool_(pool), block_tokens_(block_tokens) {}

PrefixIndex::~PrefixIndex() {
  for (auto& entry : nodes_) {
    for (void* block : entry.second->blocks) pool_.let_go(block);
  }
}

PrefixIndex::Node* PrefixIndex::find_locked(const PrefixLink& link, const Node* parent) const {
  const auto it = nodes_.find(link.key);
  if (it == nodes_.end()) return nullptr;
  Node* node = it->second.get();
  const bool same = node->parent == parent &&
                    std::equal(node->tokens.begin(), node->tokens.end(), link.tokens);
  return same ? node : nullptr;
}

std::vector<PrefixIndex::Node*> PrefixIndex::match_locked(const std::vector<PrefixLink>& links) {
  std::vector<Node*> run;
  const uint64_t now = ++clock_;
  Node* parent = nullptr;
  for (const PrefixLink& link : links) {
    Node* node = find_locked(link, parent);
    if (!node) break;
    node->last_used = now;
    run.push_back(node);
    parent = node;
  }
  return run;
}

size_t PrefixIndex::match(const std::vector<PrefixLink>& links) {
  std::lock_guard<std::mutex> lock(mutex_);
  return match_locked(links).size();
}

std::vector<std::vector<void*>> PrefixIndex::attach(const std::vector<PrefixLink>& links) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::vector<void*>> blocks;
  const size_t block_bytes = pool_.block_bytes();
  for (Node* node : match_locked(links)) {
    for (void* block : node->blocks) pool_.share(block, block_bytes);
    blocks.push_back(node->blocks);
  }
  return blocks;
}

void PrefixIndex::count_attach(size_t blocks) {
  if (blocks == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.hits += 1;
  counters_.tokens_reused += blocks * static_cast<uint64_t>(block_tokens_);
}

size_t PrefixIndex::publish(const std::vector<PrefixLink>& links,
                            const std::vector<std::vector<void*>>& blocks) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t now = ++clock_;
  Node* parent = nullptr;
  size_t published = 0;
  for (; published < blocks.size(); ++published) {
    const PrefixLink& link = links[published];
    Node* node = find_locked(link, parent);
    if (!node) {
      if (nodes_.count(link.key)) break;  // another prompt's block under a colliding key
      auto fresh = std::make_unique<Node>();
      fresh->parent = parent;
      fresh->tokens.assign(link.tokens, link.tokens + block_tokens_);
      fresh->blocks = blocks[published];
      for (void* block : fresh->blocks) pool_.hold(block);
      if (parent) parent->children += 1;
      node = fresh.get();
      nodes_.emplace(link.key, std::move(fresh));
    }
    node->last_used = now;
    parent = node;
  }
  return published;
}

std::string PrefixIndex::victim_locked(bool only_cached) const {
  const std::string* victim = nullptr;
  uint64_t oldest = UINT64_MAX;
  for (const auto& entry : nodes_) {
    const Node& node = *entry.second;
    if (node.children > 0 || node.last_used >= oldest) continue;
    if (only_cached && std::none_of(node.blocks.begin(), node.blocks.end(),
                                    [&](const void* b) { return pool_.only_held(b); })) {
      continue;
    }
    victim = &entry.first;
    oldest = node.last_used;
  }
  return victim ? *victim : std::string();
}

size_t PrefixIndex::evict_locked(const std::string& key) {
  const auto it = nodes_.find(key);
  Node& node = *it->second;
  size_t freed = 0;
  for (void* block : node.blocks) freed += pool_.let_go(block) ? pool_.block_bytes() : 0;
  if (node.parent) node.parent->children -= 1;
  nodes_.erase(it);
  return freed;
}

bool PrefixIndex::reclaim(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t freed = 0;
  for (bool only_cached : {true, false}) {
    while (freed < bytes) {
      const std::string key = victim_locked(only_cached);
      if (key.empty()) break;
      freed += evict_locked(key);
    }
  }
  counters_.bytes_reclaimed += freed;
  return freed > 0;
}

void PrefixIndex::drop(const std::vector<const void*>& blocks) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::unordered_set<const void*> dropped(blocks.begin(), blocks.end());
  std::unordered_set<const Node*> removed;
  for (const auto& entry : nodes_) {
    const std::vector<void*>& held = entry.second->blocks;
    if (std::any_of(held.begin(), held.end(), [&](const void* b) { return dropped.count(b); })) {
      removed.insert(entry.second.get());
    }
  }
  for (bool grew = !removed.empty(); grew;) {
    grew = false;
    for (const auto& entry : nodes_) {
      const Node* node = entry.second.get();
      if (node->parent && removed.count(node->parent) && removed.insert(node).second) grew = true;
    }
  }
  for (const Node* node : removed) {
    if (node->parent && !removed.count(node->parent)) node->parent->children -= 1;
  }
  size_t freed = 0;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (!removed.count(it->second.get())) {
      ++it;
      continue;
    }
    for (void* block : it->second->blocks) freed += pool_.let_go(block) ? pool_.block_bytes() : 0;
    it = nodes_.erase(it);
  }
  counters_.bytes_reclaimed += freed;
}

PrefixIndexCounters PrefixIndex::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

}  // namespace kvc
