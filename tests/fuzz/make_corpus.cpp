// Writes the generated seeds of tests/fuzz/corpus: exported sequence images of the shape
// fuzz_import uses (fuzz_import/), and call programs in fuzz_api's encoding (fuzz_api/).
// Run from the repository root after changing either encoding:
//   build/fuzz/bin/make_fuzz_corpus tests/fuzz/corpus
// (LD_PRELOAD the ASan runtime as for the targets). The YAML seeds (fuzz_config/) are
// written by hand, as are fuzz_import/offloaded_*: one_token_f32 and prompt_f16_contiguous
// rewritten as version 3 (the V dtype and an offload version after the sections, the
// checksum recomputed), the version kvc_seq_offload writes.
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_support.hpp"

namespace {

void write(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  kvf::check(out.good(), "cannot write " + path);
}

// A cache of fuzz_import's shape: 2 layers, 2 KV heads, 4 query heads, head_dim 8; `demote`
// (-1: none) the format its policy demotes K and V into.
kvc_cache* cache(kvc_dtype dtype, kvc_layout layout, const char* policy, int32_t demote) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 2;
  p.kv_heads = 2;
  p.q_heads = 4;
  p.head_dim = 8;
  p.dtype = dtype;
  p.layout = layout;
  p.block_tokens = 4;
  p.policy = policy;
  if (policy != nullptr) p.budget = 6;
  p.demote_k_dtype = p.demote_v_dtype = demote;
  kvc_cache* c = nullptr;
  kvf::require_ok(kvc_cache_create(kvf::shared_context(), &p, &c), "kvc_cache_create");
  return c;
}

// Appends and attends `tokens` tokens at positions first.. to sequence 0 on every layer, in
// one chunk, then `decode` single tokens.
void feed(kvc_cache* c, int32_t first, int32_t tokens, int32_t decode) {
  std::vector<float> q(4 * 8 * tokens), kv(2 * 8 * tokens), out(q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<float>(i % 5) * 0.5f - 1.0f;
  const int32_t seq = 0;
  auto step = [&](int32_t position, int32_t n) {
    std::vector<int32_t> positions(n);
    for (int32_t t = 0; t < n; ++t) positions[t] = position + t;
    kvc_batch b;
    kvc_batch_init(&b, 1, &seq, &n, positions.data());
    const kvc_tensor qt{q.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
    const kvc_tensor kt{kv.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
    kvc_tensor_mut ot{out.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
    for (int32_t l = 0; l < 2; ++l) {
      kvf::require_ok(kvc_append_attend(c, l, &b, &qt, &kt, &kt, nullptr, &ot), "append_attend");
    }
  };
  step(first, tokens);
  for (int32_t d = 0; d < decode; ++d) step(first + tokens + d, 1);
}

void images(const std::string& dir) {
  struct Case {
    const char* name;
    kvc_dtype dtype;
    kvc_layout layout;
    const char* policy;
    int32_t first, tokens, decode;
    bool compress;
    int32_t demote = -1;
  };
  const Case cases[] = {
      {"empty_f32", KVC_DTYPE_F32, KVC_LAYOUT_PAGED, nullptr, 0, 0, 0, false},
      {"one_token_f32", KVC_DTYPE_F32, KVC_LAYOUT_PAGED, nullptr, 0, 1, 0, false},
      {"prompt_f32", KVC_DTYPE_F32, KVC_LAYOUT_PAGED, nullptr, 0, 9, 2, false},
      {"prompt_f16_contiguous", KVC_DTYPE_F16, KVC_LAYOUT_CONTIGUOUS, nullptr, 5, 7, 1, false},
      {"prompt_bf16", KVC_DTYPE_BF16, KVC_LAYOUT_PAGED, nullptr, 0, 6, 0, false},
      {"h2o_f32_compressed", KVC_DTYPE_F32, KVC_LAYOUT_PAGED, "h2o", 0, 12, 3, true},
      {"h2o_bf16", KVC_DTYPE_BF16, KVC_LAYOUT_PAGED, "h2o", 0, 5, 1, false},
      {"tova_f16", KVC_DTYPE_F16, KVC_LAYOUT_PAGED, "tova", 0, 8, 2, true},
      {"snapkv_f32_contiguous", KVC_DTYPE_F32, KVC_LAYOUT_CONTIGUOUS, "snapkv", 2, 10, 0, true},
      // Version 5: heads with a demoted tier of f16 rows before their f32 ones.
      {"h2o_f32_demoted_f16", KVC_DTYPE_F32, KVC_LAYOUT_PAGED, "h2o", 0, 16, 2, true,
       KVC_DTYPE_F16},
  };
  for (const Case& k : cases) {
    kvc_cache* c = cache(k.dtype, k.layout, k.policy, k.demote);
    kvf::require_ok(kvc_seq_create(c, 0), "kvc_seq_create");
    if (k.tokens > 0) feed(c, k.first, k.tokens, k.decode);
    if (k.compress) {
      const int32_t seq = 0;
      kvf::require_ok(kvc_compress(c, -1, 1, &seq), "kvc_compress");
    }
    write(dir + "/" + k.name, kvf::export_of(c, 0));
    kvc_cache_destroy(c);
  }
}

// fuzz_api's encoding (tests/fuzz/fuzz_api.cpp): six bytes of cache setup (seven with
// demotion), then calls, each an opcode byte and its argument bytes.
enum Op : uint8_t { kCreate = 0, kRemove, kFork, kTruncate, kRemoveRange, kReserve, kAppend,
                    kAttend, kAppendAttend, kCompress, kReportStats, kExportImport, kQuery,
                    kOffload = 16, kRestore, kDrop, kPrefixSave, kPrefixLoad, kPrefixPublish,
                    kPrefixAttach, kPrefixLookup, kSetStream };

std::vector<uint8_t> program(std::vector<uint8_t> setup, const std::vector<uint8_t>& calls) {
  setup.insert(setup.end(), calls.begin(), calls.end());
  return setup;
}

void programs(const std::string& dir) {
  // Setup bytes: shape (layers, kv_heads, group, head_dim), storage (dtype, layout,
  // block_tokens, growth_factor), limits (memory limit, policy), budget, sinks/recent, triggers.
  // Batch: n_seqs byte, then per sequence its id, token count and first position bytes.
  // A prompt chunk of 5 tokens for seq 0 on layer 0, then decode steps.
  const std::vector<uint8_t> prefill_decode = {
      kCreate, 0,
      kAppendAttend, 0, /*batch*/ 0, 0, 132, 0, /*q k v*/ 0, 1, 0, 2, 0, 3, /*params, out*/ 1, 1,
      kAppendAttend, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 3, 1, 1,
      kAppendAttend, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 3, 1, 1,
      kCompress, 1, 1, 1, 0,
      kQuery, 1, 0, 0, 0,
      kFork, 0, 1,
      kAppendAttend, 0, 0, 1, 0, 0, 0, 1, 0, 2, 0, 3, 1, 1,
      kTruncate, 0, 3,
      kExportImport, 1, 2,
      kRemoveRange, 2, 1, 2,
      kQuery, 4, 2,
      kRemove, 0,
  };
  write(dir + "/paged_f16_no_policy", program({0x1B, 0x01, 0x03, 0, 0, 0}, prefill_decode));
  write(dir + "/contiguous_f32_h2o", program({0x09, 0x0C, 0x12, 0x06, 0x09, 0x05}, prefill_decode));
  write(dir + "/paged_bf16_snapkv_gqa", program({0x0F, 0x20, 0x1A, 0x03, 0x00, 0x12}, prefill_decode));
  write(dir + "/paged_f32_streaming", program({0x08, 0x18, 0x0F, 0x04, 0x09, 0x04}, prefill_decode));
  write(dir + "/contiguous_f16_tova", program({0x1A, 0x0D, 0x15, 0x02, 0x00, 0x01}, prefill_decode));
  // Budget bit 6: a seventh setup byte demotes K and V to q4_0 (40 = 5 + 5 * 7), keep 0.25.
  write(dir + "/paged_f16_h2o_demote_q4_0",
        program({0x1B, 0x1A, 0x12, 0x46, 0x09, 0x00, 0x28}, prefill_decode));
  // Two sequences in one batch on a stream of the cache's, reported statistics, a reserve and
  // the peak estimate, then the backend's default stream again.
  const std::vector<uint8_t> batch_of_two = {
      kCreate, 0, kCreate, 1, kSetStream, 1,
      kAppend, 0, /*batch*/ 1, 0, 140, 0, 1, 133, 0, /*k v*/ 0, 4, 0, 5,
      kAttend, 0, 1, 0, 1, 0, 1, 1, 0, 0, 6, 0, 0, 0, 0, 7, 1,
      kReportStats, 0, 0, 0, 0, 0,
      kReserve, 1, 20,
      kQuery, 3, 30, 8, 10,
      kQuery, 2,
      kAppendAttend, 1, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 3, 0, 4, 2, 2,
      kSetStream, 2,
      kCompress, 1, 2, 2, 0, 1,
  };
  write(dir + "/two_sequences_h2o", program({0x0B, 0x00, 0x12, 0x08, 0x00, 0x00}, batch_of_two));
  write(dir + "/two_sequences_knorm", program({0x03, 0x02, 0x26, 0x05, 0x08, 0x00}, batch_of_two));
  // Stores: 16 tokens of seq 0 (one layer, one KV head), its prefix saved in chunks of 4, an
  // offload and restore through the "big" store, prefix loads sharing 2 and 4 chunks, drops,
  // and an offload to the "tiny" store. Store byte: 0 big, 2 tiny; key byte: 0 k0, 1 k1.
  // A prefix: n_tokens and model byte (16: 16 tokens, model-a), the ids, the chunk size byte
  // (2: 4 tokens).
  const std::vector<uint8_t> ids = {0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0};
  std::vector<uint8_t> other = ids;
  other[9] = 2;
  std::vector<uint8_t> stores = {
      kCreate, 0,
      kAppendAttend, 0, /*batch*/ 0, 0, 135, 0, /*q k v*/ 0, 1, 0, 2, 0, 3, /*params, out*/ 1, 1,
      kAppendAttend, 0, 0, 0, 135, 0, 0, 1, 0, 2, 0, 3, 1, 1,
      kPrefixSave, 0, 0, 16};
  const auto add = [&stores](std::initializer_list<std::vector<uint8_t>> parts) {
    for (const std::vector<uint8_t>& part : parts) stores.insert(stores.end(), part.begin(), part.end());
  };
  add({ids, {2},
       {kOffload, 0, 0, 0, kRestore, 1, 0, 0},
       {kPrefixLoad, 2, 0, 16}, other, {2},
       {kPrefixLoad, 3, 0, 16}, ids, {2},
       {kDrop, 0, 0, kDrop, 0, 0, kOffload, 1, 2, 1, kRestore, 2, 2, 1, kRemove, 3}});
  write(dir + "/stores_paged_f32", program({0x08, 0x18, 0x03, 0x00, 0x00, 0x00}, stores));
  write(dir + "/stores_contiguous_f16_h2o", program({0x08, 0x1C, 0x13, 0x20, 0x00, 0x00}, stores));
  // The prefix cache (limits bit 6), blocks of 4: seq 0's 16 tokens published, attached by
  // seq 1 whole and by seq 2 up to the block where its ids differ, seq 0 removed (its blocks
  // cached), a lookup, a decode step on seq 1 and attaches that reclaim under the 16 KiB limit.
  std::vector<uint8_t> prefix_cache = {
      kCreate, 0,
      kAppendAttend, 0, /*batch*/ 0, 0, 135, 0, /*q k v*/ 0, 1, 0, 2, 0, 3, /*params, out*/ 1, 1,
      kAppendAttend, 0, 0, 0, 135, 0, 0, 1, 0, 2, 0, 3, 1, 1,
      kPrefixPublish, 0, 16};
  const auto add_cache = [&prefix_cache](std::initializer_list<std::vector<uint8_t>> parts) {
    for (const std::vector<uint8_t>& part : parts) {
      prefix_cache.insert(prefix_cache.end(), part.begin(), part.end());
    }
  };
  add_cache({ids, {0},
             {kPrefixAttach, 1, 16}, ids, {0},
             {kPrefixAttach, 2, 16}, other, {0},
             {kRemove, 0, kPrefixLookup, 16}, ids, {0},
             {kAppendAttend, 0, 0, 1, 0, 0, 0, 1, 0, 2, 0, 3, 1, 1,
              kRemove, 1, kRemove, 2, kPrefixAttach, 3, 16}, other, {0},
             {kPrefixAttach, 0, 16}, ids, {0}});
  write(dir + "/prefix_cache_paged_f32", program({0x08, 0x10, 0x42, 0x00, 0x00, 0x00}, prefix_cache));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_corpus <corpus folder>\n");
    return 2;
  }
  const std::string root = argv[1];
  images(root + "/fuzz_import");
  programs(root + "/fuzz_api");
  kvc_context_destroy(kvf::shared_context());
  return 0;
}
