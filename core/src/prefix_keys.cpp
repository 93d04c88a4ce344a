#include "prefix_keys.hpp"

#include <openssl/evp.h>

#include <memory>
#include <new>
#include <string>

#include "kvcache/kvcache_error.hpp"

namespace kvc {
namespace {

constexpr char kKeyPrefix[] = "kvc-prefix-";
constexpr uint8_t kVersionTag[8] = {'K', 'V', 'C', 'P', 'F', 'X', 0, 1};
// Read where a V format or the statistics mask would be, it is neither (a code below
// KVC_FORMAT_CODE_END, a mask of bits 1, 2 and 4).
constexpr uint8_t kRotationTag[4] = {'R', 'O', 'T', 0};

struct ContextFree {
  void operator()(EVP_MD_CTX* context) const { EVP_MD_CTX_free(context); }
};
using Sha256 = std::unique_ptr<EVP_MD_CTX, ContextFree>;

[[noreturn]] void crypto_failed(const char* step) {
  throw Error(KVC_ERR_INTERNAL, std::string("prefix key: OpenSSL SHA-256 ") + step + " failed");
}

Sha256 new_context() {
  Sha256 context(EVP_MD_CTX_new());
  if (!context) throw std::bad_alloc();
  return context;
}

void feed(EVP_MD_CTX* context, const void* data, size_t size) {
  if (EVP_DigestUpdate(context, data, size) != 1) crypto_failed("update");
}

template <class U>
void feed_le(EVP_MD_CTX* context, U value) {
  uint8_t bytes[sizeof(U)];
  for (size_t i = 0; i < sizeof(U); ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
  feed(context, bytes, sizeof bytes);
}

std::string hex_digest_of_copy(const EVP_MD_CTX* context) {
  Sha256 copy = new_context();
  if (EVP_MD_CTX_copy_ex(copy.get(), context) != 1) crypto_failed("copy");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(copy.get(), digest, &length) != 1) crypto_failed("final");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key(kKeyPrefix);
  for (unsigned int i = 0; i < length; ++i) {
    key += kHex[digest[i] >> 4];
    key += kHex[digest[i] & 0xf];
  }
  return key;
}

}  // namespace

struct PrefixKeys::State {
  Sha256 context = new_context();
  const int32_t* next_ids;
  size_t chunk_tokens;
  std::vector<uint8_t> bytes;  // one chunk's ids, little-endian
};

PrefixKeys::PrefixKeys(const PrefixIdentity& identity, const int32_t* token_ids)
    : state_(std::make_unique<State>()) {
  EVP_MD_CTX* context = state_->context.get();
  if (EVP_DigestInit_ex(context, EVP_sha256(), nullptr) != 1) crypto_failed("init");
  feed(context, kVersionTag, sizeof kVersionTag);
  feed_le<uint64_t>(context, identity.model.size());
  feed(context, identity.model.data(), identity.model.size());
  for (int32_t field : {identity.layers, identity.kv_heads, identity.q_heads, identity.head_dim}) {
    feed_le<uint32_t>(context, static_cast<uint32_t>(field));
  }
  feed_le<uint32_t>(context, static_cast<uint32_t>(identity.k_dtype));
  // Fed only when it differs, so that the keys of caches with one format stay as they were.
  if (identity.v_dtype != identity.k_dtype) {
    feed_le<uint32_t>(context, static_cast<uint32_t>(identity.v_dtype));
  }
  // Likewise only when K is rotated, after a tag, so that a rotated cache never shares chunks
  // with an unrotated one.
  if (identity.k_rotation != KVC_ROTATION_NONE) {
    feed(context, kRotationTag, sizeof kRotationTag);
    feed_le<uint32_t>(context, static_cast<uint32_t>(identity.k_rotation));
  }
  feed_le<uint32_t>(context, identity.stats);
  feed_le<uint32_t>(context, static_cast<uint32_t>(identity.chunk_tokens));
  state_->next_ids = token_ids;
  state_->chunk_tokens = static_cast<size_t>(identity.chunk_tokens);
  state_->bytes.resize(state_->chunk_tokens * 4);
}

PrefixKeys::~PrefixKeys() = default;

std::string PrefixKeys::next() {
  State& s = *state_;
  for (size_t i = 0; i < s.chunk_tokens; ++i) {
    const auto id = static_cast<uint32_t>(s.next_ids[i]);
    for (size_t b = 0; b < 4; ++b) s.bytes[4 * i + b] = static_cast<uint8_t>(id >> (8 * b));
  }
  s.next_ids += s.chunk_tokens;
  feed(s.context.get(), s.bytes.data(), s.bytes.size());
  return hex_digest_of_copy(s.context.get());
}

}  // namespace kvc
