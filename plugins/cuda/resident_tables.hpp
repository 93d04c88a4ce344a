// The bookkeeping of attend jobs' segment tables kept in device memory between calls (ABI 1.4:
// kvc_attend_job::table_id and table_version), host code that tests run on the CPU with host
// memory. A table is stored once for a version and found again while the version holds, so a
// decode step uploads only the tables of heads whose list changed (a block opened), not every
// segment of every head. Counts are not part of a table: the kernels take a job's keys from
// its key count and each segment's first key, which do not change while the version holds
// (every segment but the last is full).
//
// Each table keeps the mark of the last call that used it; a call on another stream first
// makes its stream wait for that mark, so the mark always covers every earlier use, the copy
// that filled the table included. A call that finds a table on another stream waits for the
// mark before its kernels read it. Stored tables take at most the budget given; past it the
// least recently used go, never one that a call still holds (found or stored, until the call
// has enqueued its kernels), freed on the dropping call's stream after their mark.
// Not thread-safe: the instance locks around it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

namespace kvc::cuda {

// Provider: types Stream and Mark (default-constructible: no mark); void* alloc(size_t bytes,
// Stream) (NULL when the device has no room); Mark mark(Stream) noexcept: what the stream has
// been given so far (when it cannot say, it waits for the stream and returns no mark); void
// wait(Stream, const Mark&) noexcept: later work on the stream waits for the mark; void
// free(void*, Stream, const Mark*) noexcept: ordered on the stream after the mark (NULL:
// none).
template <class Provider>
class ResidentTables {
 public:
  using Stream = typename Provider::Stream;
  using Mark = typename Provider::Mark;
  // The budget of a backend that knows nothing of its cache (created without a config).
  static constexpr size_t kDefaultBudget = size_t{256} << 20;

  struct Table {
    uint64_t id;
    void* memory;       // the call fills a stored table before its kernels read it
    bool vector_loads;  // every segment's K and V rows 16-byte aligned
  };

  ResidentTables(Provider provider, size_t budget)
      : provider_(std::move(provider)), budget_(budget) {}
  ResidentTables(const ResidentTables&) = delete;
  ResidentTables& operator=(const ResidentTables&) = delete;
  ~ResidentTables() {
    for (const Entry& entry : entries_) {
      provider_.free(entry.table.memory, Stream{}, entry.mark.get());
    }
  }

  // Table `id` at `version` with `n_segments` segments for a call on `stream`, held until
  // release(); NULL when none is stored, or a stored one was never filled.
  const Table* find(uint64_t id, uint64_t version, int32_t n_segments, Stream stream) {
    const auto found = index_.find(id);
    if (found == index_.end()) return nullptr;
    const auto entry = found->second;
    if (entry->version != version || entry->n_segments != n_segments || !entry->filled) {
      return nullptr;
    }
    if (entry->mark && entry->mark_stream != stream) {
      provider_.wait(stream, *entry->mark);
      entry->mark_stream = stream;
    }
    ++entry->holds;
    entries_.splice(entries_.begin(), entries_, entry);
    return &entry->table;
  }

  // `bytes` of device memory for table `id` at `version`, replacing any other version of it,
  // held until release(); the call fills it on `stream`. NULL when another version is held,
  // when it would pass the budget with every other table held, or when the device has no
  // room: the call then goes without.
  const Table* store(uint64_t id, uint64_t version, int32_t n_segments, size_t bytes,
                     bool vector_loads, Stream stream) {
    const auto found = index_.find(id);
    if (found != index_.end()) {
      if (found->second->holds > 0) return nullptr;
      drop(found->second, stream);
    }
    auto victim = entries_.end();
    while (bytes_ + bytes > budget_ && victim != entries_.begin()) {
      --victim;
      if (victim->holds == 0) victim = drop(victim, stream);
    }
    if (bytes_ + bytes > budget_) return nullptr;
    void* memory = provider_.alloc(bytes, stream);
    if (!memory) return nullptr;
    try {
      entries_.push_front(Entry{{id, memory, vector_loads}, version, n_segments, bytes, nullptr,
                                stream, 1, false});
      index_[id] = entries_.begin();
    } catch (...) {
      if (!entries_.empty() && entries_.front().table.memory == memory) entries_.pop_front();
      provider_.free(memory, stream, nullptr);
      throw;
    }
    bytes_ += bytes;
    return &entries_.front().table;
  }

  // What release() marks a call's tables with, made before the call holds any (it allocates).
  static std::shared_ptr<Mark> new_mark() { return std::make_shared<Mark>(); }

  // Ends the holds of one call on `stream`, the tables marked with `mark` (tables[i] filled or
  // not: a stored table is found from now on only once filled, and one never filled is
  // dropped).
  void release(const std::shared_ptr<Mark>& mark, const std::vector<const Table*>& tables,
               const std::vector<bool>& filled, Stream stream) noexcept {
    if (tables.empty()) return;
    // The new mark must cover the tables' uses on other streams too.
    const Mark* waited = nullptr;
    for (const Table* table : tables) {
      const Entry& entry = *index_.find(table->id)->second;  // held: never dropped
      if (entry.mark && entry.mark_stream != stream && entry.mark.get() != waited) {
        provider_.wait(stream, *entry.mark);
        waited = entry.mark.get();
      }
    }
    *mark = provider_.mark(stream);
    for (size_t i = 0; i < tables.size(); ++i) {
      const auto entry = index_.find(tables[i]->id)->second;
      --entry->holds;
      entry->mark = mark;
      entry->mark_stream = stream;
      if (!entry->filled && filled[i]) entry->filled = true;
      if (!entry->filled && entry->holds == 0) drop(entry, stream);
    }
  }

  size_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    Table table;
    uint64_t version;
    int32_t n_segments;
    size_t bytes;
    std::shared_ptr<Mark> mark;  // covers every use so far (NULL: no call has finished)
    Stream mark_stream;          // a stream whose later work comes after the mark: the one it
                                 // was made on, or the last that waited for it
    int holds;
    bool filled;
  };
  using Entries = std::list<Entry>;  // most recently used first

  typename Entries::iterator drop(typename Entries::iterator entry, Stream stream) {
    provider_.free(entry->table.memory, stream, entry->mark.get());
    bytes_ -= entry->bytes;
    index_.erase(entry->table.id);
    return entries_.erase(entry);
  }

  Provider provider_;
  Entries entries_;
  std::unordered_map<uint64_t, typename Entries::iterator> index_;
  size_t budget_;
  size_t bytes_ = 0;
};

}  // namespace kvc::cuda
