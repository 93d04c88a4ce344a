/* kvc-llama generate --prefix-store: the model fingerprint that keys a prompt's K/V in a
 * store, and the prompt's prefix loaded from and saved to that store. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <xxhash.h>

#include "cli.h"

enum { kFingerprintSpan = 1 << 20 };

/* Feeds `length` bytes of `f` from `offset` to the hash. */
static int hash_span(FILE *f, const char *path, off_t offset, size_t length, XXH3_state_t *state,
                     unsigned char *buffer) {
  if (fseeko(f, offset, SEEK_SET) != 0 || fread(buffer, 1, length, f) != length) {
    kvl_cli_error("%s: cannot read %zu bytes at offset %lld for the model fingerprint", path,
                  length, (long long)offset);
    return -1;
  }
  XXH3_128bits_update(state, buffer, length);
  return 0;
}

int kvl_cli_model_fingerprint(const char *path, char *out, size_t out_size) {
  FILE *f = fopen(path, "rb");
  unsigned char *buffer = (unsigned char *)malloc(kFingerprintSpan);
  XXH3_state_t *state = XXH3_createState();
  off_t size;
  size_t head, tail;
  int rc = -1;
  if (f == NULL) {
    kvl_cli_error("%s: cannot open: %s", path, strerror(errno));
    goto done;
  }
  if (buffer == NULL || state == NULL) {
    kvl_cli_error("out of host memory");
    goto done;
  }
  if (fseeko(f, 0, SEEK_END) != 0 || (size = ftello(f)) < 0) {
    kvl_cli_error("%s: cannot find its size: %s", path, strerror(errno));
    goto done;
  }
  /* The first MiB (every header) and the last MiB, without reading a byte twice. */
  head = (uint64_t)size < kFingerprintSpan ? (size_t)size : kFingerprintSpan;
  tail = (uint64_t)size - head < kFingerprintSpan ? (size_t)((uint64_t)size - head)
                                                  : kFingerprintSpan;
  XXH3_128bits_reset(state);
  if (hash_span(f, path, 0, head, state, buffer) != 0 ||
      hash_span(f, path, size - (off_t)tail, tail, state, buffer) != 0) {
    goto done;
  }
  {
    const XXH128_hash_t hash = XXH3_128bits_digest(state);
    snprintf(out, out_size, "size=%llu xxh3_128(first and last MiB)=%016llx%016llx",
             (unsigned long long)size, (unsigned long long)hash.high64,
             (unsigned long long)hash.low64);
  }
  rc = 0;
done:
  XXH3_freeState(state);
  free(buffer);
  if (f != NULL) fclose(f);
  return rc;
}

/* Prints the status's code and message after `call` and frees it. */
static int store_failure(const char *call, const char *store, kvc_status *status) {
  kvl_cli_error("%s (store '%s'): %s: %s", call, store,
                kvc_status_code_name(kvc_status_get_code(status)), kvc_status_message(status));
  kvc_status_free(status);
  return -1;
}

int kvl_cli_prefix_load(kvc_cache *cache, int32_t seq, const kvl_cli_prefix_store *store,
                        const int32_t *tokens, int32_t n_tokens, int32_t prefill_chunk,
                        int32_t *out_restored) {
  /* The first token is sampled from the last prompt token's logits, so that token is always
   * computed. Logits equal to a plain run's need the steps after the prefix to be the plain
   * run's, which end at multiples of prefill_chunk: possible when that divides the store's
   * chunks, by stopping the prefix before the chunk holding the last token. Otherwise every
   * whole chunk is restored and only the last token computed. */
  const int exact = store->chunk_tokens % prefill_chunk == 0;
  kvc_prefix prefix;
  kvc_status *status;
  kvc_prefix_init(&prefix, store->model_fingerprint, tokens, exact ? n_tokens - 1 : n_tokens);
  prefix.chunk_tokens = store->chunk_tokens;
  status = kvc_prefix_load(cache, seq, store->name, &prefix, out_restored);
  if (status != NULL) return store_failure("kvc_prefix_load", store->name, status);
  if (*out_restored == n_tokens) {
    status = kvc_seq_truncate(cache, seq, n_tokens - 1);
    if (status != NULL) {
      kvc_status_free(kvc_seq_remove(cache, seq));
      return store_failure("kvc_seq_truncate", store->name, status);
    }
    *out_restored = n_tokens - 1;
  }
  return 0;
}

int kvl_cli_prefix_save(kvc_cache *cache, int32_t seq, const kvl_cli_prefix_store *store,
                        const int32_t *tokens, int32_t n_tokens, int32_t *out_saved) {
  kvc_prefix prefix;
  kvc_status *status;
  kvc_prefix_init(&prefix, store->model_fingerprint, tokens, n_tokens);
  prefix.chunk_tokens = store->chunk_tokens;
  status = kvc_prefix_save(cache, seq, store->name, &prefix, out_saved);
  return status == NULL ? 0 : store_failure("kvc_prefix_save", store->name, status);
}
