/* Consumer of an installed kvcache: creates a context and a cache (with the default "cpu"
 * backend, found in the installed plugin folder), appends one token and prints the version.
 * Given a path, it also loads the backend plugin there (host_backend.cpp, built on the
 * installed backend skeleton) and creates a cache on it. Exits non-zero on any failure. */
#include <kvcache/kvcache.h>

#include <stdio.h>
#include <string.h>

static int check(kvc_status *st, const char *what) {
  if (st == NULL) return 0;
  fprintf(stderr, "consumer: %s failed: %s: %s\n", what,
          kvc_status_code_name(kvc_status_get_code(st)), kvc_status_message(st));
  kvc_status_free(st);
  return 1;
}

int main(int argc, char **argv) {
  enum { KV_HEADS = 2, HEAD_DIM = 8 };
  kvc_context *ctx = NULL;
  kvc_cache *cache = NULL;
  kvc_cache_params params;
  kvc_cache_stats stats;
  kvc_batch batch;
  kvc_tensor k, v;
  float kdata[KV_HEADS * HEAD_DIM], vdata[KV_HEADS * HEAD_DIM];
  int32_t seq = 0, n_tokens = 1, pos = 0, length = -1;
  int i, failed = 0;

  if (kvc_version() != KVC_VERSION_NUMBER) {
    fprintf(stderr, "consumer: header version %d but library %u\n", KVC_VERSION_NUMBER,
            (unsigned)kvc_version());
    return 1;
  }

  if (check(kvc_context_create(NULL, &ctx), "kvc_context_create")) return 1;

  kvc_cache_params_init(&params);
  params.layers = 1;
  params.kv_heads = KV_HEADS;
  params.q_heads = KV_HEADS;
  params.head_dim = HEAD_DIM;
  params.memory_limit = (size_t)1 << 20;
  if (check(kvc_cache_create(ctx, &params, &cache), "kvc_cache_create")) {
    kvc_context_destroy(ctx);
    return 1;
  }

  for (i = 0; i < KV_HEADS * HEAD_DIM; ++i) {
    kdata[i] = (float)i * 0.25f;
    vdata[i] = 1.0f - (float)i * 0.125f;
  }
  memset(&k, 0, sizeof k);
  k.data = kdata;
  k.dtype = KVC_DTYPE_F32;
  k.device = KVC_DEVICE_HOST;
  v = k;
  v.data = vdata;
  kvc_batch_init(&batch, 1, &seq, &n_tokens, &pos);

  failed = check(kvc_seq_create(cache, seq), "kvc_seq_create") ||
           check(kvc_append(cache, 0, &batch, &k, &v), "kvc_append") ||
           check(kvc_seq_length(cache, seq, 0, 1, &length), "kvc_seq_length");
  if (!failed && length != 1) {
    fprintf(stderr, "consumer: expected 1 stored token, got %d\n", (int)length);
    failed = 1;
  }
  if (!failed) {
    memset(&stats, 0, sizeof stats);
    stats.struct_size = sizeof stats;
    failed = check(kvc_cache_get_stats(cache, &stats), "kvc_cache_get_stats");
  }
  if (!failed) {
    printf("kvcache %s (header %d.%d.%d): 1 token appended, %zu bytes used, %llu tokens stored\n",
           kvc_version_string(), KVC_VERSION_MAJOR, KVC_VERSION_MINOR, KVC_VERSION_PATCH,
           stats.bytes_used, (unsigned long long)stats.tokens_stored);
  }

  kvc_cache_destroy(cache);
  if (!failed && argc > 1) {
    kvc_cache *other = NULL;
    failed = check(kvc_context_load_plugin(ctx, argv[1]), "kvc_context_load_plugin") ||
             check(kvc_cache_create_from_yaml(ctx, "backend: package_host\n", &other),
                   "a cache on the out-of-tree backend");
    kvc_cache_destroy(other);
    if (!failed) printf("out-of-tree backend %s: cache created\n", argv[1]);
  }
  kvc_context_destroy(ctx);
  return failed;
}
