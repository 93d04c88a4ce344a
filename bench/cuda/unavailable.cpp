// cuda_bench.hpp in a kvc-bench built without CUDA.
#include "../common.hpp"
#include "cuda_bench.hpp"

namespace kvc_bench::cuda {
namespace {

[[noreturn]] void unavailable() {
  throw Error("this kvc-bench was built without CUDA (no CUDA compiler found): --backend cuda "
              "needs a build with the cuda backend");
}

}  // namespace

double copy_bytes_per_s(size_t, int) { unavailable(); }

int run_attention(const CacheShape&, int32_t, int32_t, int, int) { unavailable(); }

}  // namespace kvc_bench::cuda
