// Parameters of the built-in scoring policies, read in one place so that a policy and the
// wrappers that drive it as their scorer (pyramidkv, adakv) accept exactly the same keys.
#pragma once

#include <cstdint>
#include <string>

#include "kvcache/kvcache_plugin.h"
#include "params.hpp"

namespace kvc::policies {

enum class Pooling { max, avg };

// snapkv: observation window, pooling kernel and kind.
struct SnapKvOptions {
  int32_t window = 32;
  int32_t kernel = 5;
  Pooling pooling = Pooling::max;
  static SnapKvOptions read(ParamReader& params);
};

// h2o: share of the budget given to the most recent tokens.
struct H2oOptions {
  double recent_ratio = 0.5;
  static H2oOptions read(ParamReader& params);
};

// keydiff: the anchor the keys are compared with.
enum class Anchor { normalized_mean, mean };
struct KeyDiffOptions {
  Anchor anchor = Anchor::normalized_mean;
  static KeyDiffOptions read(ParamReader& params);
};

// random: the seed of the hash.
struct RandomOptions {
  uint64_t seed = 0;
  static RandomOptions read(ParamReader& params);
};

// Reads the parameters of scorer `name` from `params` as that policy would, so that bad values
// fail at the wrapper's creation, naming the key. For a name that is not a built-in scorer,
// lets every unknown key through (the scorer checks them). Names of built-in policies that do
// not score (full, pyramidkv, adakv) are a configuration error on `key`. What the scorer
// needs (statistics, window, default sinks and recent) the host asks the scorer itself.
void read_scorer_params(const std::string& name, const char* key, ParamReader& params);

// 1-D pooling of in[0..n) into out[0..n) over the kernel's neighbours (kernel odd), the
// window clamped at the array's edges: max, or the mean of the entries inside the window.
void pool(const float* in, float* out, int32_t n, int32_t kernel, Pooling pooling);

}  // namespace kvc::policies
