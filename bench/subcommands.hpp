// The kvc-bench subcommands. To add one: declare its run function and help text here,
// define them in its own .cpp (added to bench/CMakeLists.txt), and add a row to the table
// in main.cpp.
#pragma once

#include "options.hpp"

namespace kvc_bench {

/// A subcommand reads its options (then calls opts.reject_unknown()), runs, prints
/// `name=value` lines and returns the exit status. Errors are thrown as Error/UsageError.
using RunFn = int (*)(Options& opts);

/// growth: appending tokens one at a time, contiguous and paged vs re-allocating each step.
int run_growth(Options& opts);
extern const char* const kGrowthHelp;

/// batchmax: under one memory limit for K/V and the engine's activations, serve long-prompt
/// requests with the llama example engine in four modes (full cache, compress once after a
/// chunked prefill, once layer by layer over a whole-prompt prefill, compress per prefill
/// chunk): the largest batch each fits, its peak memory and its tokens/s (Batch-Max, arXiv
/// 2412.05693).
int run_batchmax(Options& opts);
extern const char* const kBatchmaxHelp;

/// prefix: requests sharing a system prompt, and a chat whose turns extend each other, served
/// without and with the prefix cache (kvc_prefix_attach / kvc_prefix_publish): prefill tokens,
/// peak K/V, time to first token and tokens/s of each, and the logits bit for bit.
int run_prefix(Options& opts);
extern const char* const kPrefixHelp;

/// compress: compressing a cache to half vs one decode attention step over it.
int run_compress(Options& opts);
extern const char* const kCompressHelp;

/// fork: forking a sequence many ways and decoding divergent tokens on each branch: the cost
/// of a fork vs one decode attention step, and memory vs independent copies.
int run_fork(Options& opts);
extern const char* const kForkHelp;

/// attention: decode attention as a fraction of read bandwidth, append as a fraction of
/// memcpy bandwidth, and prefill attention in GFLOP/s, over one --tokens cache.
int run_attention(Options& opts);
extern const char* const kAttentionHelp;

/// scaling: cold decode attention at 1 thread vs all, over the read bandwidth's own scaling.
int run_scaling(Options& opts);
extern const char* const kScalingHelp;

/// store: offload and restore of one sequence through the host, disk and redis stores vs
/// memcpy, a file written and read in the same folder, and redis-benchmark.
int run_store(Options& opts);
extern const char* const kStoreHelp;

}  // namespace kvc_bench
