#include "options.hpp"

#include <algorithm>
#include <cstring>

#include "errors.hpp"

namespace kvc::policies {
namespace {

bool is_odd(int64_t value) { return value % 2 != 0; }

}  // namespace

SnapKvOptions SnapKvOptions::read(ParamReader& params) {
  SnapKvOptions options;
  options.window = static_cast<int32_t>(params.integer("window", options.window, 1, INT32_MAX));
  options.kernel = static_cast<int32_t>(params.integer(
      "kernel", options.kernel, 1, INT32_MAX, "an odd integer >= 1", &is_odd));
  options.pooling = params.choice("pooling", 0, {"max", "avg"}) == 0 ? Pooling::max : Pooling::avg;
  return options;
}

H2oOptions H2oOptions::read(ParamReader& params) {
  H2oOptions options;
  options.recent_ratio = params.number("recent_ratio", options.recent_ratio, 0.0, 1.0);
  return options;
}

KeyDiffOptions KeyDiffOptions::read(ParamReader& params) {
  KeyDiffOptions options;
  options.anchor =
      params.choice("anchor", 0, {"normalized_mean", "mean"}) == 0 ? Anchor::normalized_mean
                                                                    : Anchor::mean;
  return options;
}

RandomOptions RandomOptions::read(ParamReader& params) {
  RandomOptions options;
  options.seed = static_cast<uint64_t>(params.integer("seed", 0, INT64_MIN, INT64_MAX,
                                                      "an integer (64-bit)"));
  return options;
}

void read_scorer_params(const std::string& name, const char* key, ParamReader& params) {
  if (name == "window" || name == "streaming" || name == "tova" || name == "knorm") {
  } else if (name == "h2o") {
    H2oOptions::read(params);
  } else if (name == "snapkv") {
    SnapKvOptions::read(params);
  } else if (name == "keydiff") {
    KeyDiffOptions::read(params);
  } else if (name == "random") {
    RandomOptions::read(params);
  } else if (name == "full" || name == "pyramidkv" || name == "adakv") {
    config_error(key, "expected a policy that scores tokens, got '" + name +
                          "' (it only sets budgets)");
  } else {
    params.allow_unknown();
  }
}

void pool(const float* __restrict in, float* __restrict out, int32_t n, int32_t kernel,
          Pooling pooling) {
  if (n <= 0) return;
  // Neighbours beyond n - 1 on either side never exist.
  const int32_t half = std::min((kernel - 1) / 2, n - 1);
  std::memcpy(out, in, sizeof(float) * static_cast<size_t>(n));
  if (pooling == Pooling::max) {
    for (int32_t d = 1; d <= half; ++d) {
      for (int32_t i = 0; i < n - d; ++i) out[i] = in[i + d] > out[i] ? in[i + d] : out[i];
      for (int32_t i = d; i < n; ++i) out[i] = in[i - d] > out[i] ? in[i - d] : out[i];
    }
    return;
  }
  for (int32_t d = 1; d <= half; ++d) {
    for (int32_t i = 0; i < n - d; ++i) out[i] += in[i + d];
    for (int32_t i = d; i < n; ++i) out[i] += in[i - d];
  }
  // Entries inside the clamped window of i: 1 + min(i, half) + min(n - 1 - i, half).
  for (int32_t i = 0; i < n; ++i) {
    const int32_t left = i < half ? i : half;
    const int32_t right = n - 1 - i < half ? n - 1 - i : half;
    out[i] /= static_cast<float>(1 + left + right);
  }
}

}  // namespace kvc::policies
