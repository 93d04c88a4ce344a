/* kvc-c-demo: how a C inference engine embeds kvcache.
 *
 * The engine owns the model: it computes Q, K and V of every layer (keys already rotated by
 * RoPE), and everything after attention. kvcache stores K and V under a memory limit and
 * computes attention over what it stores. Here Q, K and V are deterministic pseudo-random
 * numbers standing in for a model, so the program shows the calls, not a language model.
 *
 *   1. a context (plugins, thread arena) and a cache: 2 layers, 8 query heads sharing
 *      2 KV heads (GQA), head_dim 64, f16 storage, paged blocks, a 512 KiB memory limit;
 *   2. three sequences, prefilled in one batch with prompts of different lengths;
 *   3. a few decode steps, one token per sequence per step (kvc_append_attend);
 *   4. a request that does not fit: OUT_OF_MEMORY, handled, and nothing changed;
 *   5. sequence operations: a fork for two sampled continuations of one prompt, a truncate
 *      that rolls back rejected speculative tokens, and an export/import round trip.
 *
 * Build: part of the kvcache build (build/release/bin/kvc-c-demo), or on its own against an
 * installed kvcache with this folder's CMakeLists.txt, or
 *   cc -std=c99 main.c $(pkg-config --cflags --libs kvcache) -o kvc-c-demo
 */
#include <kvcache/kvcache.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LAYERS = 2, Q_HEADS = 8, KV_HEADS = 2, HEAD_DIM = 64, N_SEQS = 3, DECODE_STEPS = 4 };
#define MEMORY_LIMIT ((size_t)512 * 1024)

/* Every fallible call returns a kvc_status*, NULL on success. This demo stops on an error
 * it does not expect; an engine would fail the request instead. */
static void check(kvc_status *status, const char *what) {
  if (status == NULL) return;
  fprintf(stderr, "error: %s: %s: %s\n", what,
          kvc_status_code_name(kvc_status_get_code(status)), kvc_status_message(status));
  kvc_status_free(status);
  exit(EXIT_FAILURE);
}

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes);
  if (p == NULL) {
    fprintf(stderr, "error: out of host memory\n");
    exit(EXIT_FAILURE);
  }
  return p;
}

/* ------------------------------------------------ the stand-in for a model */

static uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

/* Fills n values in [-1, 1) determined by (what, layer, seq, pos): the same token always
 * gets the same Q, K and V, so every run prints the same numbers. */
static void fill(float *dst, int n, uint32_t what, int layer, int seq, int pos) {
  uint32_t s = mix(what * 0x9e3779b9U ^ mix((uint32_t)layer * 131U + (uint32_t)seq * 7919U +
                                            (uint32_t)pos * 104729U));
  int i;
  for (i = 0; i < n; ++i) {
    s = mix(s + (uint32_t)i);
    dst[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
  }
}

static kvc_tensor host_f32(const float *data) {
  kvc_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = KVC_DTYPE_F32; /* the cache converts to its f16 storage */
  t.device = KVC_DEVICE_HOST;
  t.row_stride = 0; /* dense: heads * head_dim elements per token */
  return t;
}

/* One forward pass of the engine over a batch: sequence i brings n_tokens[i] new tokens at
 * positions[...] (concatenated in batch order). For each layer the engine computes Q, K, V
 * of the new tokens, and kvcache stores K and V and returns attention output. Writes the
 * last layer's output, [total, Q_HEADS, HEAD_DIM], to out. */
static kvc_status *forward(kvc_cache *cache, int32_t n_seqs, const int32_t *seq_ids,
                           const int32_t *n_tokens, const int32_t *positions, float *out) {
  int32_t total = 0, i, t, r;
  int layer;
  float *q, *k, *v;
  kvc_batch batch;
  kvc_attention_params attn;
  kvc_tensor qt, kt, vt;
  kvc_tensor_mut ot;
  kvc_status *status = NULL;

  for (i = 0; i < n_seqs; ++i) total += n_tokens[i];
  q = xmalloc((size_t)total * Q_HEADS * HEAD_DIM * sizeof(float));
  k = xmalloc((size_t)total * KV_HEADS * HEAD_DIM * sizeof(float));
  v = xmalloc((size_t)total * KV_HEADS * HEAD_DIM * sizeof(float));

  kvc_batch_init(&batch, n_seqs, seq_ids, n_tokens, positions);
  kvc_attention_params_init(&attn); /* scale 1/sqrt(head_dim), causal, no window */
  qt = host_f32(q);
  kt = host_f32(k);
  vt = host_f32(v);
  memset(&ot, 0, sizeof ot);
  ot.data = out;
  ot.dtype = KVC_DTYPE_F32;
  ot.device = KVC_DEVICE_HOST;

  for (layer = 0; layer < LAYERS && status == NULL; ++layer) {
    for (i = 0, r = 0; i < n_seqs; ++i) {
      for (t = 0; t < n_tokens[i]; ++t, ++r) {
        fill(q + (size_t)r * Q_HEADS * HEAD_DIM, Q_HEADS * HEAD_DIM, 1, layer, seq_ids[i], positions[r]);
        fill(k + (size_t)r * KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, 2, layer, seq_ids[i], positions[r]);
        fill(v + (size_t)r * KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, 3, layer, seq_ids[i], positions[r]);
      }
    }
    /* Store the new K/V, then attend each new query over everything stored for its
     * sequence up to its position. All-or-nothing: on error nothing of this layer is stored. */
    status = kvc_append_attend(cache, layer, &batch, &qt, &kt, &vt, &attn, &ot);
  }
  free(q);
  free(k);
  free(v);
  return status;
}

/* --------------------------------------------------------------- reporting */

static kvc_cache_stats get_stats(const kvc_cache *cache) {
  kvc_cache_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s; /* tells the library which fields this program knows */
  check(kvc_cache_get_stats(cache, &s), "kvc_cache_get_stats");
  return s;
}

static void print_stats(const char *title, const kvc_cache *cache) {
  kvc_cache_stats s = get_stats(cache);
  printf("%s\n", title);
  printf("  memory : %7.1f KiB used, %7.1f KiB peak, %7.1f KiB limit (%4.1f%% used)\n",
         (double)s.bytes_used / 1024.0, (double)s.bytes_peak / 1024.0,
         (double)s.bytes_limit / 1024.0, 100.0 * (double)s.bytes_used / (double)s.bytes_limit);
  printf("  blocks : %zu used, %zu free under the limit\n", s.blocks_used, s.blocks_free);
  printf("  tokens : %llu stored (summed over sequence x layer x KV head), %d sequences\n",
         (unsigned long long)s.tokens_stored, (int)s.sequences);
  printf("  shared : %7.1f KiB of the used memory held by more than one sequence (forks)\n",
         (double)s.bytes_shared / 1024.0);
}

static void print_lengths(const kvc_cache *cache, const int32_t *seq_ids, int n) {
  int i;
  printf("  lengths:");
  for (i = 0; i < n; ++i) {
    int32_t len = 0;
    check(kvc_seq_length(cache, seq_ids[i], 0, 0, &len), "kvc_seq_length");
    printf(" seq %d = %d%s", (int)seq_ids[i], (int)len, i + 1 < n ? "," : "");
  }
  printf(" tokens\n");
}

/* The first values of query head 0 of one output row. */
static void print_out(const char *label, int32_t seq, int32_t pos, const float *row) {
  printf("  %s seq %d pos %3d: out[head 0][0..3] = %+.4f %+.4f %+.4f %+.4f\n", label, (int)seq,
         (int)pos, row[0], row[1], row[2], row[3]);
}

/* ----------------------------------------------------- sequence operations */

/* 5a. Two sampled continuations of one context: fork its sequence (here after the prompt and
 *     the decode steps above). The fork shares every K/V block of the source (no copy,
 *     nothing more counted against the limit); a block is copied only when a branch writes
 *     into it: here the partly filled last block, on the first step. Both branches then
 *     decode in one batch, each with its own tokens (here: Q/K/V seeded by the sequence id,
 *     as if each had sampled another token). Returns the branches' length. */
static int32_t fork_continuations(kvc_cache *cache, int32_t prompt_seq, int32_t branch_seq,
                                  int32_t length) {
  int32_t ids[2], n_tokens[2] = {1, 1}, positions[2];
  float out[2 * Q_HEADS * HEAD_DIM];
  int step;

  ids[0] = prompt_seq;
  ids[1] = branch_seq;
  check(kvc_seq_fork(cache, prompt_seq, branch_seq), "kvc_seq_fork");
  printf("\nfork: seq %d = a fork of seq %d (%d tokens), sharing its blocks\n", (int)branch_seq,
         (int)prompt_seq, (int)length);
  print_stats("stats after the fork:", cache);
  printf("decode: %d steps of both branches in one batch, each its own token\n", DECODE_STEPS);
  for (step = 0; step < DECODE_STEPS; ++step, ++length) {
    positions[0] = positions[1] = length;
    check(forward(cache, 2, ids, n_tokens, positions, out), "decode both branches");
  }
  print_out("last step,", ids[0], length - 1, out);
  print_out("last step,", ids[1], length - 1, out + Q_HEADS * HEAD_DIM);
  print_lengths(cache, ids, 2);
  print_stats("stats after the divergent decode:", cache);
  return length;
}

/* 5b. Speculative decoding: a draft model proposed DRAFT tokens, the engine verified them in
 *     one chunk, and the target model accepted only the first. The rejected tokens' K/V are
 *     dropped by position: kvc_seq_truncate keeps positions < length + accepted. */
static void rollback_speculation(kvc_cache *cache, int32_t seq, int32_t length) {
  enum { DRAFT = 4, ACCEPTED = 1 };
  int32_t n_tokens = DRAFT, positions[DRAFT], len = 0, t;
  float *out = xmalloc((size_t)DRAFT * Q_HEADS * HEAD_DIM * sizeof(float));

  for (t = 0; t < DRAFT; ++t) positions[t] = length + t;
  check(forward(cache, 1, &seq, &n_tokens, positions, out), "verify draft");
  free(out);
  check(kvc_seq_length(cache, seq, 0, 0, &len), "kvc_seq_length");
  printf("\nspeculation: seq %d verified %d draft tokens (now %d tokens), accepted %d\n",
         (int)seq, DRAFT, (int)len, ACCEPTED);
  check(kvc_seq_truncate(cache, seq, length + ACCEPTED), "kvc_seq_truncate");
  check(kvc_seq_length(cache, seq, 0, 0, &len), "kvc_seq_length");
  printf("  truncate at position %d: seq %d holds %d tokens\n", (int)(length + ACCEPTED),
         (int)seq, (int)len);
  if (len != length + ACCEPTED) {
    fprintf(stderr, "error: expected %d tokens after the truncate\n", (int)(length + ACCEPTED));
    exit(EXIT_FAILURE);
  }
}

/* 5c. Park a sequence: export it into a buffer (the versioned, checksummed format of
 *     docs/sequence_format.md, which a file or another process can hold too), then import
 *     it under a new id and check that every (layer, KV head) holds as many tokens. */
static void export_import(kvc_cache *cache, int32_t seq, int32_t new_seq) {
  size_t size = 0, written = 0;
  void *bytes;
  int layer, head, same = 1;

  check(kvc_seq_export_size(cache, seq, &size), "kvc_seq_export_size");
  bytes = xmalloc(size);
  check(kvc_seq_export(cache, seq, bytes, size, &written), "kvc_seq_export");
  printf("\nexport: seq %d into a %.1f KiB buffer\n", (int)seq, (double)written / 1024.0);
  check(kvc_seq_import(cache, new_seq, bytes, written), "kvc_seq_import");
  free(bytes);
  for (layer = 0; layer < LAYERS; ++layer) {
    for (head = 0; head < KV_HEADS; ++head) {
      int32_t a = -1, b = -1;
      check(kvc_seq_length(cache, seq, layer, head, &a), "kvc_seq_length");
      check(kvc_seq_length(cache, new_seq, layer, head, &b), "kvc_seq_length");
      same = same && a == b;
    }
  }
  printf("import: as seq %d; lengths match seq %d on every layer and KV head: %s\n",
         (int)new_seq, (int)seq, same ? "yes" : "NO");
  if (!same) exit(EXIT_FAILURE);
}

/* -------------------------------------------------------------------- main */

int main(void) {
  static const int32_t prompt_len[N_SEQS] = {37, 64, 100};
  int32_t seq_ids[N_SEQS] = {0, 1, 2};
  int32_t length[N_SEQS];
  int32_t n_tokens[N_SEQS];
  int32_t *positions;
  float *out;
  int32_t total = 0, i, t, r, step;
  size_t row = (size_t)Q_HEADS * HEAD_DIM;
  kvc_context *ctx = NULL;
  kvc_cache *cache = NULL;
  kvc_cache_params params;
  size_t p;

  printf("kvcache %s: C embedding demo\n\n", kvc_version_string());

  /* 1. Context and cache. NULL YAML: default configuration; the built-in plugins (the "cpu"
   *    backend) are found next to the library. */
  check(kvc_context_create(NULL, &ctx), "kvc_context_create");
  for (p = 0; p < kvc_context_plugin_count(ctx); ++p) {
    kvc_plugin_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    check(kvc_context_plugin_info(ctx, p, &info), "kvc_context_plugin_info");
    printf("plugin: %-8s %s (%s)\n", info.kind == KVC_PLUGIN_BACKEND ? "backend" : "policy",
           info.name, info.path);
  }

  kvc_cache_params_init(&params); /* defaults, and struct_size */
  params.layers = LAYERS;
  params.q_heads = Q_HEADS;
  params.kv_heads = KV_HEADS;
  params.head_dim = HEAD_DIM;
  params.dtype = KVC_DTYPE_F16;
  params.layout = KVC_LAYOUT_PAGED;
  params.block_tokens = 16;
  params.memory_limit = MEMORY_LIMIT;
  params.backend = "cpu";
  check(kvc_cache_create(ctx, &params, &cache), "kvc_cache_create");
  printf("cache : %d layers, %d query heads / %d KV heads, head_dim %d, f16, paged (%d-token "
         "blocks), limit %zu KiB\n\n",
         LAYERS, Q_HEADS, KV_HEADS, HEAD_DIM, (int)params.block_tokens, MEMORY_LIMIT / 1024);

  /* 2. Prefill: three sequences with prompts of different lengths, in one batch. */
  for (i = 0; i < N_SEQS; ++i) {
    check(kvc_seq_create(cache, seq_ids[i]), "kvc_seq_create");
    total += prompt_len[i];
  }
  positions = xmalloc((size_t)total * sizeof(int32_t));
  out = xmalloc((size_t)total * row * sizeof(float));
  for (i = 0, r = 0; i < N_SEQS; ++i)
    for (t = 0; t < prompt_len[i]; ++t) positions[r++] = t;

  printf("prefill: one batch of %d tokens (seq 0: %d, seq 1: %d, seq 2: %d), %d layers\n",
         (int)total, (int)prompt_len[0], (int)prompt_len[1], (int)prompt_len[2], LAYERS);
  check(forward(cache, N_SEQS, seq_ids, prompt_len, positions, out), "prefill");
  for (i = 0, r = 0; i < N_SEQS; ++i) {
    r += prompt_len[i];
    length[i] = prompt_len[i];
    print_out("last layer,", seq_ids[i], length[i] - 1, out + (size_t)(r - 1) * row);
  }
  print_lengths(cache, seq_ids, N_SEQS);
  print_stats("stats after prefill:", cache);

  /* 3. Decode: each step every sequence brings one token at the next position. */
  printf("\ndecode: %d steps, one token per sequence per step\n", DECODE_STEPS);
  for (step = 1; step <= DECODE_STEPS; ++step) {
    for (i = 0; i < N_SEQS; ++i) {
      n_tokens[i] = 1;
      positions[i] = length[i];
    }
    check(forward(cache, N_SEQS, seq_ids, n_tokens, positions, out), "decode");
    printf(" step %d\n", (int)step);
    for (i = 0; i < N_SEQS; ++i) {
      print_out("", seq_ids[i], positions[i], out + (size_t)i * row);
      length[i] += 1;
    }
  }
  print_lengths(cache, seq_ids, N_SEQS);
  print_stats("stats after decode:", cache);

  /* 4. A request that does not fit. Sequence 3 brings a 4096-token prompt; its K and V
   *    alone (4096 tokens x 2 KV heads x 64 x 2 bytes, twice) take 2 MiB per layer, past the
   *    512 KiB limit. kvc_append is all-or-nothing: it returns OUT_OF_MEMORY and stores
   *    nothing, so the engine can queue the request until sequences finish, or retry after
   *    compressing. (kvc_seq_reserve asks the same question before any compute.) */
  {
    enum { BIG = 4096 };
    int32_t big_seq = 3, big_n = BIG;
    int32_t *big_pos = xmalloc(BIG * sizeof(int32_t));
    float *big_kv = xmalloc((size_t)BIG * KV_HEADS * HEAD_DIM * sizeof(float));
    kvc_tensor kt = host_f32(big_kv), vt = host_f32(big_kv);
    kvc_batch batch;
    kvc_cache_stats before, after;
    kvc_status *status;
    int32_t len = -1;
    int unchanged;

    for (t = 0; t < BIG; ++t) {
      big_pos[t] = t;
      fill(big_kv + (size_t)t * KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, 2, 0, big_seq, t);
    }
    check(kvc_seq_create(cache, big_seq), "kvc_seq_create");
    before = get_stats(cache);
    kvc_batch_init(&batch, 1, &big_seq, &big_n, big_pos);

    printf("\nappend: seq %d brings a %d-token prompt (layer 0 alone needs ~%zu KiB)\n",
           (int)big_seq, BIG, (size_t)BIG * KV_HEADS * HEAD_DIM * 2 * 2 / 1024);
    status = kvc_append(cache, 0, &batch, &kt, &vt);
    if (kvc_status_get_code(status) != KVC_ERR_OUT_OF_MEMORY) {
      fprintf(stderr, "error: expected OUT_OF_MEMORY, got %s\n",
              kvc_status_code_name(kvc_status_get_code(status)));
      return EXIT_FAILURE;
    }
    printf("  -> %s: %s\n", kvc_status_code_name(kvc_status_get_code(status)),
           kvc_status_message(status));
    kvc_status_free(status);

    after = get_stats(cache);
    check(kvc_seq_length(cache, big_seq, 0, 0, &len), "kvc_seq_length");
    unchanged = after.bytes_used == before.bytes_used && after.bytes_peak == before.bytes_peak &&
                after.tokens_stored == before.tokens_stored &&
                after.blocks_used == before.blocks_used && len == 0;
    printf("  handled: request deferred; seq %d holds %d tokens; cache unchanged: %s\n",
           (int)big_seq, (int)len, unchanged ? "yes" : "NO");
    if (!unchanged) return EXIT_FAILURE;
    check(kvc_seq_remove(cache, big_seq), "kvc_seq_remove");
    free(big_pos);
    free(big_kv);
  }
  print_stats("stats after the refused request:", cache);

  /* 5. Sequence operations: seq 2 as it stands forked into seq 4, which then rolls back a
   *    speculation and is copied as seq 5 through an export. */
  {
    int32_t branch_len = fork_continuations(cache, seq_ids[2], 4, length[2]);
    rollback_speculation(cache, 4, branch_len);
    export_import(cache, 4, 5);
    check(kvc_seq_remove(cache, 4), "kvc_seq_remove");
    check(kvc_seq_remove(cache, 5), "kvc_seq_remove");
  }

  /* Finished sequences give their blocks back to the pool. */
  for (i = 0; i < N_SEQS; ++i) check(kvc_seq_remove(cache, seq_ids[i]), "kvc_seq_remove");
  print_stats("\nstats after removing every sequence:", cache);

  free(positions);
  free(out);
  kvc_cache_destroy(cache); /* before its context */
  kvc_context_destroy(ctx);
  return EXIT_SUCCESS;
}
