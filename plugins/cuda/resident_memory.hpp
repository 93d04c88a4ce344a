// The device side of ResidentTables (resident_tables.hpp): table memory from the instance's
// stream-ordered scratch pool, and events that order a table's free behind the last call that
// read it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "kvcache/kvcache_plugin.h"
#include "resident_tables.hpp"

namespace kvc::cuda {

struct ResidentMemory {
  using Stream = cudaStream_t;
  // An event recorded on a stream; none when it could not be made (the stream was waited for).
  class Mark {
   public:
    Mark() = default;
    explicit Mark(cudaEvent_t event) : event_(event) {}
    Mark(Mark&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
    Mark& operator=(Mark&& other) noexcept {
      std::swap(event_, other.event_);
      return *this;
    }
    Mark(const Mark&) = delete;
    Mark& operator=(const Mark&) = delete;
    ~Mark();
    cudaEvent_t event() const { return event_; }

   private:
    cudaEvent_t event_ = nullptr;
  };

  cudaMemPool_t pool;
  void* alloc(size_t bytes, Stream stream) const;
  Mark mark(Stream stream) const noexcept;
  void wait(Stream stream, const Mark& mark) const noexcept;
  void free(void* memory, Stream stream, const Mark* after) const noexcept;
};

using DeviceTables = ResidentTables<ResidentMemory>;

// The bytes a cache's stored tables may take: four times the tables of every block its memory
// limit holds (32 bytes a block), so that the tables of every live head fit with room for
// those of heads gone (a bound below that would drop, least recently used first, tables that
// the next layer's call needs), and at least 64 MiB. Without a config:
// DeviceTables::kDefaultBudget.
size_t resident_table_budget(const kvc_backend_config* config);

}  // namespace kvc::cuda
