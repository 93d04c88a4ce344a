// The public f16/bf16 conversions (kvcache/kvcache_half.h) against the branchy reference of
// reference_attention.hpp: every f16 pattern, and f32 values on every rounding boundary.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>

#include "kvcache/kvcache_half.h"
#include "reference_attention.hpp"

namespace {

bool same_value(float a, float b) { return (std::isnan(a) && std::isnan(b)) || ref::float_bits(a) == ref::float_bits(b); }

}  // namespace

TEST_CASE("half: every f16 pattern converts exactly and back") {
  int mismatches = 0;
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float f = kvc_f16_to_f32(static_cast<uint16_t>(h));
    if (!same_value(f, ref::f16_to_f32(static_cast<uint16_t>(h)))) ++mismatches;
    if (!std::isnan(f) && kvc_f32_to_f16(f) != h) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("half: f32 to f16 and bf16 round like the reference") {
  int f16_mismatches = 0, bf16_mismatches = 0;
  // Every f32 whose low 12 bits are one of the patterns around the f16 rounding point (and
  // every 4099th pattern besides) covers ties, carries into the exponent, subnormals,
  // overflow to inf and nans of both signs.
  const uint32_t lows[] = {0x000u, 0x001u, 0xfffu, 0x7ffu, 0x800u, 0x801u};
  for (uint64_t hi = 0; hi < (uint64_t{1} << 32); hi += 0x1000u) {
    for (uint32_t low : lows) {
      const float f = ref::bits_float(static_cast<uint32_t>(hi) | low);
      if (kvc_f32_to_f16(f) != ref::f32_to_f16(f)) ++f16_mismatches;
    }
  }
  for (uint64_t x = 0; x < (uint64_t{1} << 32); x += 4099) {
    const float f = ref::bits_float(static_cast<uint32_t>(x));
    if (kvc_f32_to_f16(f) != ref::f32_to_f16(f)) ++f16_mismatches;
    if (kvc_f32_to_bf16(f) != ref::f32_to_bf16(f)) ++bf16_mismatches;
    const uint16_t b = static_cast<uint16_t>(x >> 16);
    if (!same_value(kvc_bf16_to_f32(b), ref::bf16_to_f32(b))) ++bf16_mismatches;
  }
  CHECK(f16_mismatches == 0);
  CHECK(bf16_mismatches == 0);
}

TEST_CASE("half: known values") {
  CHECK(kvc_f32_to_f16(1.0f) == 0x3c00u);
  CHECK(kvc_f32_to_f16(1.0f + 0x1.0p-11f) == 0x3c00u);        // a tie goes to even
  CHECK(kvc_f32_to_f16(1.0f + 3 * 0x1.0p-11f) == 0x3c02u);    // a tie goes to even
  CHECK(kvc_f32_to_f16(65504.0f) == 0x7bffu);                 // the largest f16
  CHECK(kvc_f32_to_f16(65520.0f) == 0x7c00u);                 // rounds past it: inf
  CHECK(kvc_f32_to_f16(-0x1.0p-24f) == 0x8001u);              // the least subnormal
  CHECK(kvc_f32_to_f16(NAN) == 0x7e00u);
  CHECK(kvc_f32_to_bf16(1.0f + 0x1.0p-8f) == 0x3f80u);        // a tie goes to even
  CHECK(kvc_f32_to_bf16(1.0f + 3 * 0x1.0p-8f) == 0x3f82u);
  CHECK(std::isnan(kvc_bf16_to_f32(kvc_f32_to_bf16(NAN))));
  CHECK(kvc_bf16_to_f32(0xc040u) == -3.0f);
}
