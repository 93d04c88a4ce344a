// Memory for values of megabytes (a sequence image, a store's value), shared by the core and
// the store plugins. Header-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include <sys/mman.h>

namespace kvc::support {

// Bytes that are not cleared first. From 2 MiB up they are aligned to 2 MiB and marked for
// transparent huge pages (MADV_HUGEPAGE; Debian's kernels give them only where asked), so
// that their first writes fault once per 2 MiB instead of once per 4 KiB page: on a VM those
// faults were most of a large store get's time (docs/stores_results.md).
class LargeBytes {
 public:
  LargeBytes() = default;
  // `size` bytes (one when size is 0, so that data() is never null for a value that exists);
  // empty, with data() null, when they cannot be had.
  static LargeBytes allocate(size_t size) noexcept {
    LargeBytes out;
    const size_t wanted = size > 0 ? size : 1;
    void* memory = nullptr;
    if (wanted >= kHugePage) {
      const size_t rounded = (wanted + kHugePage - 1) / kHugePage * kHugePage;
      if (rounded < wanted) return out;  // overflowed
      memory = std::aligned_alloc(kHugePage, rounded);
#ifdef MADV_HUGEPAGE
      // Advice only: where the kernel has no huge pages the bytes work the same.
      if (memory != nullptr) madvise(memory, rounded, MADV_HUGEPAGE);
#endif
    } else {
      memory = std::malloc(wanted);
    }
    if (memory == nullptr) return out;
    out.bytes_.reset(static_cast<uint8_t*>(memory));
    out.size_ = size;
    return out;
  }
  uint8_t* data() const { return bytes_.get(); }
  size_t size() const { return size_; }

 private:
  static constexpr size_t kHugePage = size_t{2} << 20;
  struct Free {
    void operator()(uint8_t* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> bytes_;
  size_t size_ = 0;
};

}  // namespace kvc::support
