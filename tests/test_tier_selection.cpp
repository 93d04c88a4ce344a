// select_tiers (core/src/selection.hpp) against selections worked out by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "selection.hpp"

namespace {

using kvc::Fate;

// One letter per token: k keep, d demote, e evict.
std::string letters(const std::vector<Fate>& fates) {
  std::string out;
  for (Fate f : fates) out += f == Fate::keep ? 'k' : f == Fate::demote ? 'd' : 'e';
  return out;
}

// Tokens of 10 bytes kept, 3 demoted.
constexpr kvc::TierCosts kCosts{10, 3};

std::string select(const std::vector<float>& scores, const std::vector<uint8_t>& demoted,
                   size_t budget, size_t keep, kvc::ProtectedRange range) {
  return letters(kvc::select_tiers(scores.data(), demoted.data(), static_cast<int32_t>(scores.size()),
                                   budget, keep, kCosts, range));
}

}  // namespace

TEST_CASE("select_tiers: tokens that fit change nothing") {
  const std::vector<float> scores{1, 2, 3, 4};
  CHECK(select(scores, {0, 1, 0, 1}, 26, 0, {0, 4}) == "kdkd");
  CHECK(select(scores, {0, 0, 0, 0}, 40, 0, {0, 4}) == "kkkk");
}

TEST_CASE("select_tiers: kept by score up to the keep share, then demoted, then evicted") {
  // 8 tokens, none protected; budget 37 bytes, 20 of them for kept tokens: the two best kept
  // (20), the next five demoted (15), the worst evicted (it would make 38).
  const std::vector<float> scores{8, 1, 7, 2, 6, 3, 5, 4};
  const std::vector<uint8_t> none(8, 0);
  CHECK(select(scores, none, 37, 20, {0, 8}) == "kekddddd");
  CHECK(select(scores, none, 38, 20, {0, 8}) == "kdkddddd");
  // Keep share 0: every token demoted (24 bytes).
  CHECK(select(scores, none, 40, 0, {0, 8}) == "dddddddd");
  // The whole budget for kept tokens: evict-only, four kept and no room left.
  CHECK(select(scores, none, 40, 40, {0, 8}) == "kekekeke");
  // 42 bytes: the 2 left over after four kept buy no demoted token (3 bytes).
  CHECK(select(scores, none, 42, 42, {0, 8}) == "kekekeke");
}

TEST_CASE("select_tiers: the protected range first, even past the budget; demoted stay demoted") {
  const std::vector<float> scores{0, 9, 8, 7, 6, 0};
  // Sink 0 and recent 5 protected (20 bytes, which spend the keep share of 20): token 1 stays
  // demoted (3), tokens 2, 3 and 4 are demoted (9): 32 bytes in all.
  CHECK(select(scores, {0, 1, 0, 0, 0, 0}, 35, 20, {1, 5}) == "kddddk");
  // The keep share has room for one more: the best token not yet demoted is kept.
  CHECK(select(scores, {0, 1, 0, 0, 0, 0}, 45, 30, {1, 5}) == "kdkddk");
  // A budget below the protected tokens keeps them and nothing else.
  CHECK(select(scores, {0, 0, 0, 0, 0, 0}, 5, 5, {1, 5}) == "keeeek");
}

TEST_CASE("select_tiers: ties go to the later token, NaN scores rank lowest") {
  const float nan = std::nanf("");
  CHECK(select({1, 1, 1, 1}, {0, 0, 0, 0}, 18, 10, {0, 4}) == "eddk");
  CHECK(select({nan, 1, nan, 0}, {0, 0, 0, 0}, 16, 10, {0, 4}) == "ekdd");
}
