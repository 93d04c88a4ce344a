/* kvc-llama generate: prefill a prompt (in chunks), then decode one token at a time, for one
 * continuation or several forked from the prefilled prompt. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: kvc-llama generate --model FILE [--tokenizer FILE]\n"
    "                          [--prompt TEXT | --token-ids FILE [--prompt-tokens N]]\n"
    "                          [--steps N] [--config FILE] [--chunk N] [--temperature T]\n"
    "                          [--seed N] [--samples N] [--prefix-store NAME\n"
    "                          [--prefix-chunk N]] [--dump-logits FILE]\n"
    "\n"
    "Prints the prompt and its continuation, then timings and the cache's counters (stderr),\n"
    "among them time_to_first_token_ms=T: from the start of the prompt's processing (the\n"
    "store lookup included) to the logits the first token is sampled from.\n"
    "\n"
    "  --model FILE       llama2.c version 0 checkpoint (stories260K.bin, stories15M.bin, ...)\n"
    "                     or GGUF file (llama architecture)\n"
    "  --tokenizer FILE   llama2.c tokenizer file matching the model's vocabulary (default\n"
    "                     for GGUF: the model's own vocabulary)\n"
    "  --prompt TEXT      text to continue (default: none, the story starts after BOS; a\n"
    "                     model without BOS needs a prompt)\n"
    "  --token-ids FILE   the prompt already encoded: whitespace-separated decimal ids, used\n"
    "                     as they are (no BOS is added)\n"
    "  --prompt-tokens N  only the first N ids of --token-ids\n"
    "  --steps N          tokens to generate (default 256; stops early at BOS or EOS and\n"
    "                     when the model's seq_len is reached)\n"
    "  --config FILE      kvcache YAML (cache:, policy:, ...); the model sets the shape.\n"
    "                     Default: f32 storage, paged layout, no eviction policy\n"
    "  --chunk N          prefill the prompt in chunks of N tokens (default: all at once);\n"
    "                     chunks end at multiples of N counted from position 0, also when\n"
    "                     a restored prefix makes the prefill start later\n"
    "  --temperature T    0 (default): greedy; > 0: sample from softmax(logits / T)\n"
    "  --seed N           random seed for sampling (default 42)\n"
    "  --samples N        N continuations of the prompt (default 1): the prompt is prefilled\n"
    "                     once, its sequence forked N - 1 times (kvc_seq_fork shares its K/V)\n"
    "                     and the N branches decoded as one batch; sample i samples with seed\n"
    "                     S + i, so it continues as a run with --seed S+i alone would. Each\n"
    "                     sample is printed after a line \"--- sample i (seed S+i) ---\"\n"
    "  --prefix-store NAME  share the prompt's K/V through store NAME of the --config file's\n"
    "                     `stores:` section (docs/stores.md). Before the prefill, the\n"
    "                     longest run of whole chunks of the prompt that the store holds is\n"
    "                     restored (kvc_prefix_load), less what is computed again: the last\n"
    "                     token (its logits are needed) and, when --chunk divides\n"
    "                     --prefix-chunk, the rest of the last token's chunk, so that the\n"
    "                     steps after the prefix are those of a run without the store and\n"
    "                     the logits equal its bit for bit. Only the tokens after the prefix\n"
    "                     are prefilled, at their positions; after the prefill the prompt's\n"
    "                     whole chunks are saved (kvc_prefix_save, skipping those already\n"
    "                     there). Chunks are keyed by a fingerprint of the model file,\n"
    "                     computed once at start: its size and an XXH3-128 hash of its\n"
    "                     first and last MiB (the header included). Prints\n"
    "                     prefix_tokens_restored=N, prefix_tokens_saved=N and\n"
    "                     prefix_load_ms=T, the restore's part of time_to_first_token_ms\n"
    "                     (stderr)\n"
    "  --prefix-chunk N   tokens per stored chunk (default 256)\n"
    "  --dump-logits FILE  writes the logits the first token is sampled from: vocab f32\n"
    "                     values, raw bytes in this machine's order. A run that restores\n"
    "                     its prefix writes the same bytes (compare with cmp) as a run\n"
    "                     without the store given the same --chunk, when that divides\n"
    "                     --prefix-chunk (with steps of other sizes BLAS may round the\n"
    "                     same rows differently)\n";

static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int32_t sample_token(float *logits, int32_t n, double temperature, uint64_t *state) {
  int32_t i;
  double sum = 0.0, r, acc = 0.0, top;
  if (temperature <= 0.0) return kvl_cli_argmax(logits, n);
  top = logits[kvl_cli_argmax(logits, n)];
  for (i = 0; i < n; ++i) {
    logits[i] = (float)exp((logits[i] - top) / temperature);
    sum += logits[i];
  }
  r = (double)(next_random(state) >> 11) * (1.0 / 9007199254740992.0) * sum;
  for (i = 0; i < n; ++i) {
    acc += logits[i];
    if (r < acc) return i;
  }
  return n - 1;
}

/* One continuation: its random state and the tokens it generated. */
typedef struct kvl_sample {
  uint64_t rng;
  int32_t *tokens;
  int32_t n_tokens;
} kvl_sample;

/* The samples of one run; sample i decodes as sequence i. live lists the samples still
 * generating, in the order of the logits rows; the step_* arrays are one batched step. */
typedef struct kvl_samples {
  kvl_sample *items;
  int32_t n;
  int32_t *live, *step_ids, *step_tokens, *step_positions, *ones;
  int32_t n_live;
} kvl_samples;

static void kvl_samples_free(kvl_samples *samples) {
  int32_t i;
  for (i = 0; samples->items != NULL && i < samples->n; ++i) free(samples->items[i].tokens);
  free(samples->items);
  free(samples->live);
  free(samples->step_ids);
  free(samples->step_tokens);
  free(samples->step_positions);
  free(samples->ones);
}

static int kvl_samples_init(kvl_samples *samples, int32_t n, int32_t seed, int32_t steps) {
  int32_t i;
  const size_t ints = (size_t)n * sizeof(int32_t);
  samples->items = (kvl_sample *)calloc((size_t)n, sizeof(kvl_sample));
  samples->live = (int32_t *)malloc(ints);
  samples->step_ids = (int32_t *)malloc(ints);
  samples->step_tokens = (int32_t *)malloc(ints);
  samples->step_positions = (int32_t *)malloc(ints);
  samples->ones = (int32_t *)malloc(ints);
  if (samples->items == NULL || samples->live == NULL || samples->step_ids == NULL ||
      samples->step_tokens == NULL || samples->step_positions == NULL || samples->ones == NULL) {
    return -1;
  }
  samples->n = n;
  for (i = 0; i < n; ++i) {
    samples->items[i].rng = (uint64_t)seed + (uint64_t)i;
    samples->items[i].tokens = (int32_t *)malloc(((size_t)steps + 1) * sizeof(int32_t));
    if (samples->items[i].tokens == NULL) return -1;
    samples->live[i] = i;
  }
  samples->n_live = n;
  return 0;
}

static void print_samples(const kvl_cli_session *s, const kvl_samples *samples,
                          const int32_t *prompt, int32_t n_prompt, int32_t echo_from,
                          int32_t seed) {
  int32_t i, t;
  for (i = 0; i < samples->n; ++i) {
    const kvl_sample *sample = &samples->items[i];
    printf("--- sample %d (seed %d) ---\n", (int)i, (int)(seed + i));
    for (t = echo_from; t < n_prompt; ++t) {
      kvl_cli_print_piece(stdout, kvl_tokenizer_decode(s->tokenizer, t > 0 ? prompt[t - 1] : -1,
                                                       prompt[t]));
    }
    for (t = 0; t < sample->n_tokens; ++t) {
      const int32_t previous = t > 0 ? sample->tokens[t - 1] : prompt[n_prompt - 1];
      kvl_cli_print_piece(stdout, kvl_tokenizer_decode(s->tokenizer, previous, sample->tokens[t]));
    }
    printf("\n");
  }
}

/* The prompt's ids: --token-ids (its first max_tokens ids when max_tokens > 0), else --prompt
 * encoded, with BOS when the model has one. NULL after printing an error. */
static int32_t *read_prompt(const kvl_cli_session *s, const char *prompt, const char *ids_path,
                            int32_t max_tokens, int32_t *out_n) {
  int32_t *tokens;
  if (ids_path != NULL) {
    tokens = kvl_cli_read_ids(ids_path, kvl_model_config(s->model)->vocab_size, out_n);
    if (tokens != NULL && max_tokens > 0 && *out_n > max_tokens) *out_n = max_tokens;
    return tokens;
  }
  tokens = (int32_t *)malloc((strlen(prompt) + 3) * sizeof(int32_t));
  if (tokens == NULL) {
    kvl_cli_error("out of host memory");
    return NULL;
  }
  *out_n = kvl_tokenizer_encode(s->tokenizer, prompt, kvl_model_bos(s->model) >= 0, 0, tokens,
                                (int32_t)strlen(prompt) + 3);
  return tokens;
}

/* Prefills tokens [from, n_prompt) of sequence seq in chunks ending at multiples of `chunk`
 * (so that the steps are those of a prefill from 0), leaving the last token's logits. */
static int prefill(kvl_cli_session *s, int32_t seq, const int32_t *tokens, int32_t from,
                   int32_t n_prompt, int32_t chunk, float *logits) {
  char error[1024];
  int32_t pos, i;
  int32_t *positions = (int32_t *)malloc((size_t)chunk * sizeof(int32_t));
  if (positions == NULL) {
    kvl_cli_error("out of host memory");
    return -1;
  }
  for (pos = from; pos < n_prompt;) {
    const int32_t chunk_end = (pos / chunk + 1) * chunk;
    int32_t n = (chunk_end < n_prompt ? chunk_end : n_prompt) - pos;
    for (i = 0; i < n; ++i) positions[i] = pos + i;
    if (kvl_engine_forward(s->engine, 1, &seq, &n, tokens + pos, positions, 0, logits, error,
                           sizeof error) != 0) {
      free(positions);
      kvl_cli_error("%s", error);
      return -1;
    }
    pos += n;
  }
  free(positions);
  return 0;
}

int kvl_cmd_generate(int argc, char **argv) {
  const char *model_path = NULL, *tokenizer_path = NULL, *prompt = NULL, *config = NULL;
  const char *steps_text = NULL, *chunk_text = NULL, *temperature_text = NULL, *seed_text = NULL;
  const char *samples_text = NULL, *ids_path = NULL, *prompt_tokens_text = NULL;
  const char *prefix_chunk_text = NULL, *dump_path = NULL;
  kvl_cli_prefix_store store = {NULL, 256, ""};
  const kvl_cli_option options[] = {
      {"--model", &model_path, NULL},
      {"--tokenizer", &tokenizer_path, NULL},
      {"--prompt", &prompt, NULL},
      {"--token-ids", &ids_path, NULL},
      {"--prompt-tokens", &prompt_tokens_text, NULL},
      {"--steps", &steps_text, NULL},
      {"--config", &config, NULL},
      {"--chunk", &chunk_text, NULL},
      {"--temperature", &temperature_text, NULL},
      {"--seed", &seed_text, NULL},
      {"--samples", &samples_text, NULL},
      {"--prefix-store", &store.name, NULL},
      {"--prefix-chunk", &prefix_chunk_text, NULL},
      {"--dump-logits", &dump_path, NULL},
  };
  int32_t steps = 256, chunk = 0, seed = 42, n_samples = 1, n_prompt = 0, seq_len, vocab, seq = 0;
  int32_t generated = 0, decode_steps = 0, pos, i, prompt_tokens = 0, restored = 0, saved = 0;
  int32_t echo_from;
  int has_bos;
  double temperature = 0.0, t_start, t_loaded, t_prefilled, t_decoding, t_end;
  int32_t *tokens = NULL;
  float *logits = NULL;
  kvl_samples samples = {0};
  kvl_cli_session s;
  char error[1024];
  int rc;

  rc = kvl_cli_parse(argc, argv, usage, options, sizeof options / sizeof options[0]);
  if (rc != KVL_EXIT_OK) return rc < 0 ? KVL_EXIT_OK : rc;
  if (model_path == NULL) return kvl_cli_usage_error(argv[0], usage, "--model is required");
  if (prompt != NULL && ids_path != NULL) {
    return kvl_cli_usage_error(argv[0], usage, "give at most one of --prompt and --token-ids");
  }
  if (prompt_tokens_text != NULL && ids_path == NULL) {
    return kvl_cli_usage_error(argv[0], usage, "--prompt-tokens needs --token-ids");
  }
  if (prefix_chunk_text != NULL && store.name == NULL) {
    return kvl_cli_usage_error(argv[0], usage, "--prefix-chunk needs --prefix-store");
  }
  if ((rc = kvl_cli_int(argv[0], usage, "--steps", steps_text, 0, 1L << 30, &steps)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--chunk", chunk_text, 1, 1L << 30, &chunk)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--seed", seed_text, 0, 2147483647L, &seed)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--samples", samples_text, 1, 4096, &n_samples)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--prompt-tokens", prompt_tokens_text, 1, 1L << 30,
                        &prompt_tokens)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--prefix-chunk", prefix_chunk_text, 1, 65536,
                        &store.chunk_tokens)) != 0 ||
      (rc = kvl_cli_double(argv[0], usage, "--temperature", temperature_text, 0.0, &temperature)) !=
          0) {
    return rc;
  }
  if (store.name != NULL && kvl_cli_model_fingerprint(model_path, store.model_fingerprint,
                                                      sizeof store.model_fingerprint) != 0) {
    return KVL_EXIT_FAILURE;
  }

  if (kvl_cli_open(&s, model_path, tokenizer_path, config) != 0) return KVL_EXIT_FAILURE;
  seq_len = kvl_model_config(s.model)->seq_len;
  vocab = kvl_model_config(s.model)->vocab_size;
  has_bos = kvl_model_bos(s.model) >= 0;
  tokens = read_prompt(&s, prompt != NULL ? prompt : "", ids_path, prompt_tokens, &n_prompt);
  if (tokens == NULL) {
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  if (n_prompt == 0) {
    kvl_cli_error("this model has no BOS token to start from: give a --prompt");
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  if (n_prompt < 1 || n_prompt > seq_len) {
    kvl_cli_error("the prompt has %d tokens; the model's seq_len is %d", (int)n_prompt,
                  (int)seq_len);
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  echo_from = has_bos && tokens[0] == kvl_model_bos(s.model) ? 1 : 0;
  if (chunk == 0 || chunk > n_prompt) chunk = n_prompt;
  logits = (float *)malloc((size_t)vocab * (size_t)n_samples * sizeof(float));
  if (logits == NULL || kvl_samples_init(&samples, n_samples, seed, steps) != 0) {
    kvl_cli_error("out of host memory");
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  if (kvl_cli_open_engine(&s, chunk > n_samples ? chunk : n_samples) != 0) {
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  kvl_cli_print_cache_config(stderr, s.cache);

  /* The prompt, echoed as run.c does (several samples each print it), then its prefix
   * restored from the store (which creates the sequence) and the rest prefilled. */
  for (i = echo_from; n_samples == 1 && i < n_prompt; ++i) {
    kvl_cli_print_piece(stdout,
                        kvl_tokenizer_decode(s.tokenizer, i > 0 ? tokens[i - 1] : -1, tokens[i]));
  }
  fflush(stdout);
  t_start = kvl_cli_now();
  if (store.name != NULL) {
    if (kvl_cli_prefix_load(s.cache, seq, &store, tokens, n_prompt, chunk, &restored) != 0) {
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
  } else {
    kvc_status *status = kvc_seq_create(s.cache, seq);
    if (status != NULL) {
      kvl_cli_error("kvc_seq_create: %s", kvc_status_message(status));
      kvc_status_free(status);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
  }
  t_loaded = kvl_cli_now();
  if (prefill(&s, seq, tokens, restored, n_prompt, chunk, logits) != 0) {
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  t_prefilled = kvl_cli_now();
  if (store.name != NULL &&
      kvl_cli_prefix_save(s.cache, seq, &store, tokens, n_prompt, &saved) != 0) {
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  if (dump_path != NULL && kvl_cli_write_floats(dump_path, logits, (size_t)vocab) != 0) {
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  t_decoding = kvl_cli_now();

  /* The other samples are forks of the prefilled sequence, starting from its logits. */
  for (i = 1; i < n_samples; ++i) {
    kvc_status *status = kvc_seq_fork(s.cache, seq, i);
    if (status != NULL) {
      kvl_cli_error("kvc_seq_fork: %s", kvc_status_message(status));
      kvc_status_free(status);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
    memcpy(logits + (size_t)i * (size_t)vocab, logits, (size_t)vocab * sizeof(float));
  }

  /* Decode: every live sample picks a token, prints (or keeps) it, and feeds it back; the
   * live samples step as one batch. */
  pos = n_prompt;
  while (samples.n_live > 0) {
    int32_t n_step = 0;
    for (i = 0; i < samples.n_live; ++i) {
      kvl_sample *sample = &samples.items[samples.live[i]];
      float *row = logits + (size_t)i * (size_t)vocab;
      int32_t token = sample_token(row, vocab, temperature, &sample->rng);
      int32_t previous = sample->n_tokens > 0 ? sample->tokens[sample->n_tokens - 1]
                                              : tokens[n_prompt - 1];
      /* BOS starts the next story; EOS ends this one. */
      if (token == kvl_model_eos(s.model) || (has_bos && token == kvl_model_bos(s.model))) continue;
      sample->tokens[sample->n_tokens++] = token;
      ++generated;
      if (n_samples == 1) {
        kvl_cli_print_piece(stdout, kvl_tokenizer_decode(s.tokenizer, previous, token));
        fflush(stdout);
      }
      if (sample->n_tokens == steps || pos >= seq_len) continue;
      samples.step_ids[n_step] = samples.live[i];
      samples.step_tokens[n_step] = token;
      samples.step_positions[n_step] = pos;
      ++n_step;
    }
    /* Those that go on, in order: their logits rows follow the same order. */
    samples.n_live = n_step;
    memcpy(samples.live, samples.step_ids, (size_t)n_step * sizeof(int32_t));
    if (n_step == 0) break;
    for (i = 0; i < n_step; ++i) samples.ones[i] = 1;
    if (kvl_engine_forward(s.engine, n_step, samples.step_ids, samples.ones, samples.step_tokens,
                           samples.step_positions, 0, logits, error, sizeof error) != 0) {
      kvl_cli_error("%s", error);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
    ++pos;
    ++decode_steps;
  }
  t_end = kvl_cli_now();
  if (n_samples == 1) printf("\n");
  if (n_samples > 1) print_samples(&s, &samples, tokens, n_prompt, echo_from, seed);
  if (store.name != NULL) {
    fprintf(stderr, "prefix_tokens_restored=%d\nprefix_tokens_saved=%d\nprefix_load_ms=%.3f\n",
            (int)restored, (int)saved, 1e3 * (t_loaded - t_start));
  }
  fprintf(stderr, "time_to_first_token_ms=%.3f\n", 1e3 * (t_prefilled - t_start));
  fprintf(stderr, "prefill: %d tokens in %.2f ms (%.0f tokens/s, chunks of %d)", (int)n_prompt,
          1e3 * (t_prefilled - t_start), n_prompt / (t_prefilled - t_start), (int)chunk);
  if (store.name != NULL) fprintf(stderr, ", %d of them restored", (int)restored);
  fprintf(stderr, "\n");
  fprintf(stderr, "generated %d tokens; decode: %d steps in %.2f ms, %.1f tokens/s\n",
          (int)generated, (int)decode_steps, 1e3 * (t_end - t_decoding),
          decode_steps > 0 ? decode_steps / (t_end - t_decoding) : 0.0);
  kvl_cli_print_cache_stats(stderr, s.cache);
  rc = KVL_EXIT_OK;

done:
  kvl_samples_free(&samples);
  free(logits);
  free(tokens);
  kvl_cli_close(&s);
  return rc;
}
