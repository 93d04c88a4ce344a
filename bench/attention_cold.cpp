#include "attention_cold.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "timer.hpp"

namespace kvc_bench {

DecodeTimes time_decode(const CacheShape& shape, int32_t sequences, uint64_t min_total_bytes,
                        int threads, int reps, BaselinePasses* paired) {
  DecodeTimes times;
  times.set_bytes = shape.kv_bytes() * static_cast<uint64_t>(sequences);
  times.sets = static_cast<int>(
      std::max<uint64_t>(2, (min_total_bytes + times.set_bytes - 1) / times.set_bytes));
  std::vector<std::unique_ptr<FilledCache>> sets;
  for (int i = 0; i < times.sets; ++i) {
    CacheShape seeded = shape;
    seeded.seed = shape.seed + static_cast<uint64_t>(i);
    sets.push_back(std::make_unique<FilledCache>(seeded, nullptr, 0, sequences, threads));
  }
  double cold = std::numeric_limits<double>::infinity();
  std::vector<double> fractions;
  for (int pass = 0; pass <= reps; ++pass) {  // pass 0 only touches every page once
    const double read_bps = paired != nullptr && pass > 0 ? paired->read_bytes_per_s() : 0;
    Timer t;
    for (const auto& set : sets) set->attend_decode_step();
    if (pass == 0) continue;
    const double step_s = t.seconds() / times.sets;
    cold = std::min(cold, step_s);
    if (paired != nullptr)
      fractions.push_back(static_cast<double>(times.set_bytes) / step_s / read_bps);
  }
  times.cold_paired_fraction = median(fractions);
  double warm = std::numeric_limits<double>::infinity();
  sets.front()->attend_decode_step();
  for (int rep = 0; rep < reps; ++rep) {
    Timer t;
    sets.front()->attend_decode_step();
    warm = std::min(warm, t.seconds());
  }
  kvc_attention_params one_key;
  kvc_attention_params_init(&one_key);
  one_key.sliding_window = 1;
  double host = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < reps; ++rep) {
    Timer t;
    sets.front()->attend_decode_step(&one_key);
    host = std::min(host, t.seconds());
  }
  times.cold_seconds = cold;
  times.warm_seconds = warm;
  times.host_seconds = host;
  return times;
}

double decode_macs_per_kv_byte(const CacheShape& shape) {
  const double group = static_cast<double>(shape.q_heads) / shape.kv_heads;
  const double kv_row_bytes = static_cast<double>(shape.formats.kv_row_bytes(shape.head_dim));
  return 2.0 * group * shape.head_dim / kv_row_bytes;
}

DecodeRoofline decode_roofline(const CacheShape& shape, double read_bytes_per_s, double fma_per_s) {
  DecodeRoofline roofline;
  roofline.compute_bound_bytes_per_s = fma_per_s / decode_macs_per_kv_byte(shape);
  roofline.bytes_per_s = std::min(read_bytes_per_s, roofline.compute_bound_bytes_per_s);
  return roofline;
}

}  // namespace kvc_bench
