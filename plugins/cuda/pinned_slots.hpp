// The bookkeeping of the cuda backend's pinned staging buffers (staging.*), host code that
// tests run on the CPU with host memory and fake events. A call takes the smallest free buffer
// that holds its bytes (free: not taken, and the copy last enqueued from or into it has run)
// and is at most 4 times its size (at least 1 MiB), or else a new one of that size. So that
// one large call does not keep its buffer for the instance's lifetime, a buffer no call has
// taken for the last 256 acquisitions goes back to the host: checked every 256 acquisitions
// and before a new buffer is made, never while it is taken or its copy may still run.
// Not thread-safe: the pool locks around it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvc::cuda {

// Provider: Event and Stream types; void* alloc(size_t) (throws when the host has none),
// void free(void*); Event make_event() (throws), void destroy(Event); void record(Event,
// Stream); bool done(Event) (throws on a device error); void wait(Event).
template <class Provider>
class PinnedSlots {
 public:
  using Event = typename Provider::Event;
  using Stream = typename Provider::Stream;
  static constexpr size_t kMinBytes = size_t{1} << 20;
  static constexpr uint64_t kIdleAcquisitions = 256;
  static constexpr size_t kLargestOverSize = 4;

  struct Buffer {
    void* data;
    size_t slot;
  };

  explicit PinnedSlots(Provider provider) : provider_(provider) {}
  PinnedSlots(const PinnedSlots&) = delete;
  PinnedSlots& operator=(const PinnedSlots&) = delete;
  ~PinnedSlots() {
    for (Slot& slot : slots_) {
      if (slot.data) retire(slot, true);
    }
  }

  // A buffer of at least `bytes`, taken until release().
  Buffer acquire(size_t bytes) {
    ++clock_;
    if (clock_ % kIdleAcquisitions == 0) retire_idle();
    const size_t size = bytes > kMinBytes ? bytes : kMinBytes;
    const size_t largest = size <= SIZE_MAX / kLargestOverSize ? size * kLargestOverSize : SIZE_MAX;
    size_t best = slots_.size();
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& slot = slots_[i];
      if (!slot.data || slot.taken || slot.capacity < bytes || slot.capacity > largest) continue;
      if (best < slots_.size() && slots_[best].capacity <= slot.capacity) continue;
      if (!provider_.done(slot.done)) continue;
      best = i;
    }
    if (best == slots_.size()) best = add(size);
    Slot& slot = slots_[best];
    slot.taken = true;
    slot.last_taken = clock_;
    return {slot.data, best};
  }

  // The buffer is free again once the work enqueued on `stream` so far has run (if that
  // cannot be recorded, it stays taken).
  void release(const Buffer& buffer, Stream stream) {
    Slot& slot = slots_[buffer.slot];
    provider_.record(slot.done, stream);
    slot.taken = false;
  }

  size_t bytes_held() const {
    size_t bytes = 0;
    for (const Slot& slot : slots_) bytes += slot.data ? slot.capacity : 0;
    return bytes;
  }

 private:
  struct Slot {
    void* data = nullptr;  // NULL: an empty entry, reused by the next buffer made
    size_t capacity = 0;
    Event done{};
    bool taken = false;
    uint64_t last_taken = 0;
  };

  size_t add(size_t bytes) {
    retire_idle();
    Slot slot;
    slot.capacity = bytes;
    slot.done = provider_.make_event();
    try {
      slot.data = provider_.alloc(slot.capacity);
    } catch (...) {
      provider_.destroy(slot.done);
      throw;
    }
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].data) {
        slots_[i] = slot;
        return i;
      }
    }
    try {
      slots_.push_back(slot);
    } catch (...) {
      retire(slot, false);
      throw;
    }
    return slots_.size() - 1;
  }

  void retire_idle() {
    for (Slot& slot : slots_) {
      if (slot.data && !slot.taken && clock_ - slot.last_taken >= kIdleAcquisitions &&
          provider_.done(slot.done)) {
        retire(slot, false);
      }
    }
  }

  void retire(Slot& slot, bool wait) {
    if (wait) provider_.wait(slot.done);
    provider_.free(slot.data);
    provider_.destroy(slot.done);
    slot = Slot{};
  }

  Provider provider_;
  std::vector<Slot> slots_;
  uint64_t clock_ = 0;
};

}  // namespace kvc::cuda
