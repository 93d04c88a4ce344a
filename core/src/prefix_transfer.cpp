#include "prefix_transfer.hpp"

#include <vector>

#include "kvcache/kvcache_error.hpp"
#include "prefix_chunks.hpp"
#include "prefix_keys.hpp"
#include "stored_image.hpp"

namespace kvc {
int32_t save_prefix(Cache& cache, int32_t seq_id, const std::string& store,
                    const PrefixRequest& prefix) {
  const Store& target = cache.context().store(store);
  const int32_t n_chunks = prefix.n_tokens / prefix.chunk_tokens;
  const int32_t tokens = n_chunks * prefix.chunk_tokens;
  const SequenceImage image = cache.export_sequence(seq_id, static_cast<size_t>(tokens));
  check_prefix_heads(image, seq_id, tokens);
  PrefixKeys keys(cache.prefix_identity(prefix.model, prefix.chunk_tokens), prefix.token_ids);
  for (int32_t c = 0; c < n_chunks; ++c) {
    const std::string key = keys.next();
    if (target.exists(key)) continue;
    const std::vector<uint8_t> bytes = encode(prefix_chunk(image, c, prefix.chunk_tokens));
    target.put(key, bytes.data(), bytes.size());
  }
  return tokens;
}

int32_t load_prefix(Cache& cache, int32_t seq_id, const std::string& store,
                    const PrefixRequest& prefix) {
  const Store& source = cache.context().store(store);
  cache.check_new_sequence_id(seq_id);
  const PrefixIdentity identity = cache.prefix_identity(prefix.model, prefix.chunk_tokens);
  PrefixKeys keys(identity, prefix.token_ids);
  SequenceImage joined;
  int32_t found = 0;
  while (found < prefix.n_tokens / prefix.chunk_tokens) {
    const std::string key = keys.next();
    StoredValue bytes;
    try {
      bytes = source.get(key);
    } catch (const Error& e) {
      if (e.code() == KVC_ERR_NOT_FOUND) break;
      throw;
    }
    const SequenceImage chunk = decode_value(bytes, source, key);
    check_chunk(chunk, identity, found, key);
    append_chunk(joined, chunk);
    ++found;
  }
  if (found == 0) {
    cache.create_sequence(seq_id);
  } else {
    cache.import_sequence(seq_id, std::move(joined));
  }
  return found * prefix.chunk_tokens;
}

}  // namespace kvc
