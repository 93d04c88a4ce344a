// random: a baseline. Each token's score is a hash of (seed, seq_id, layer, kv_head, pos)
// mapped to [0, 1): reproducible, and independent of storage order and of other tokens.
#include <cstdint>

#include "adapter.hpp"
#include "jobs.hpp"
#include "options.hpp"

namespace kvc::policies {
namespace {

// SplitMix64's finaliser.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// MurmurHash3's 32-bit finaliser: a bijection, vectorisable.
inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  return x ^ (x >> 16);
}

class Random {
 public:
  static constexpr const char* kName = "random";
  explicit Random(ParamReader& params) : options_(RandomOptions::read(params)) {}

  void needs(kvc_policy_needs& /*needs*/) const noexcept {}

  void score(const kvc_score_job* jobs, size_t n_jobs) const {
    for (size_t j = 0; j < n_jobs; ++j) {
      const kvc_score_job& job = jobs[j];
      check_job(job, j, 0);
      uint64_t key = mix64(options_.seed);
      key = mix64(key ^ (static_cast<uint64_t>(static_cast<uint32_t>(job.seq_id)) << 32 |
                         static_cast<uint32_t>(job.layer)));
      key = mix64(key ^ static_cast<uint32_t>(job.kv_head));
      const uint32_t low = static_cast<uint32_t>(key);
      const uint32_t high = static_cast<uint32_t>(key >> 32);
      const int32_t* __restrict pos = job.pos;
      float* __restrict scores = job.scores;
      for (int32_t i = 0; i < job.n_tokens; ++i) {
        uint32_t h = mix32(mix32(static_cast<uint32_t>(pos[i]) ^ low) ^ high);
        scores[i] = static_cast<float>(h >> 8) * 0x1p-24f;  // 24 bits: exact in a float
      }
    }
  }

 private:
  RandomOptions options_;
};

}  // namespace
}  // namespace kvc::policies

KVC_POLICY_PLUGIN(kvc::policies::Random);
