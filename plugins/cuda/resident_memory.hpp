// The device side of ResidentTables (resident_tables.hpp): table memory from the instance's
// stream-ordered scratch pool, and events that order a table's free behind the last call that
// read it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

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
  void free(void* memory, Stream stream, const Mark* after) const noexcept;
};

using DeviceTables = ResidentTables<ResidentMemory>;

}  // namespace kvc::cuda
