/* kvc-llama generate: prefill a prompt (in chunks), then decode one token at a time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: kvc-llama generate --model FILE [--tokenizer FILE] [--prompt TEXT] [--steps N]\n"
    "                          [--config FILE] [--chunk N] [--temperature T] [--seed N]\n"
    "\n"
    "Prints the prompt and its continuation, then timings and the cache's counters (stderr).\n"
    "\n"
    "  --model FILE       llama2.c version 0 checkpoint (stories260K.bin, stories15M.bin, ...)\n"
    "                     or GGUF file (llama architecture)\n"
    "  --tokenizer FILE   llama2.c tokenizer file matching the model's vocabulary (default\n"
    "                     for GGUF: the model's own vocabulary)\n"
    "  --prompt TEXT      text to continue (default: none, the story starts after BOS; a\n"
    "                     model without BOS needs a prompt)\n"
    "  --steps N          tokens to generate (default 256; stops early at BOS or EOS and\n"
    "                     when the model's seq_len is reached)\n"
    "  --config FILE      kvcache YAML (cache:, policy:, ...); the model sets the shape.\n"
    "                     Default: f32 storage, paged layout, no eviction policy\n"
    "  --chunk N          prefill the prompt in chunks of N tokens (default: all at once)\n"
    "  --temperature T    0 (default): greedy; > 0: sample from softmax(logits / T)\n"
    "  --seed N           random seed for sampling (default 42)\n";

static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int32_t sample(float *logits, int32_t n, double temperature, uint64_t *state) {
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

int kvl_cmd_generate(int argc, char **argv) {
  const char *model_path = NULL, *tokenizer_path = NULL, *prompt = "", *config = NULL;
  const char *steps_text = NULL, *chunk_text = NULL, *temperature_text = NULL, *seed_text = NULL;
  const kvl_cli_option options[] = {
      {"--model", &model_path, NULL},
      {"--tokenizer", &tokenizer_path, NULL},
      {"--prompt", &prompt, NULL},
      {"--steps", &steps_text, NULL},
      {"--config", &config, NULL},
      {"--chunk", &chunk_text, NULL},
      {"--temperature", &temperature_text, NULL},
      {"--seed", &seed_text, NULL},
  };
  int32_t steps = 256, chunk = 0, seed = 42, n_prompt, seq_len, vocab, seq = 0;
  int32_t generated = 0, decode_steps = 0, pos, token, previous, i;
  int has_bos;
  double temperature = 0.0, t_start, t_prefilled, t_end;
  uint64_t rng;
  int32_t *tokens = NULL;
  float *logits = NULL;
  kvl_cli_session s;
  char error[1024];
  int rc;

  rc = kvl_cli_parse(argc, argv, usage, options, sizeof options / sizeof options[0]);
  if (rc != KVL_EXIT_OK) return rc < 0 ? KVL_EXIT_OK : rc;
  if (model_path == NULL) return kvl_cli_usage_error(argv[0], usage, "--model is required");
  if ((rc = kvl_cli_int(argv[0], usage, "--steps", steps_text, 0, 1L << 30, &steps)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--chunk", chunk_text, 1, 1L << 30, &chunk)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--seed", seed_text, 0, 2147483647L, &seed)) != 0 ||
      (rc = kvl_cli_double(argv[0], usage, "--temperature", temperature_text, 0.0, &temperature)) !=
          0) {
    return rc;
  }
  rng = (uint64_t)seed;

  if (kvl_cli_open(&s, model_path, tokenizer_path, config) != 0) return KVL_EXIT_FAILURE;
  seq_len = kvl_model_config(s.model)->seq_len;
  vocab = kvl_model_config(s.model)->vocab_size;
  tokens = (int32_t *)malloc((strlen(prompt) + 3) * sizeof(int32_t));
  if (tokens == NULL) {
    kvl_cli_error("out of host memory");
    kvl_cli_close(&s);
    return KVL_EXIT_FAILURE;
  }
  has_bos = kvl_model_bos(s.model) >= 0;
  n_prompt = kvl_tokenizer_encode(s.tokenizer, prompt, has_bos, 0, tokens,
                                  (int32_t)strlen(prompt) + 3);
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
  if (chunk == 0 || chunk > n_prompt) chunk = n_prompt;
  logits = (float *)malloc((size_t)vocab * sizeof(float));
  if (logits == NULL) {
    kvl_cli_error("out of host memory");
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  if (kvl_cli_open_engine(&s, chunk) != 0) {
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  kvl_cli_print_cache_config(stderr, s.cache);
  {
    kvc_status *status = kvc_seq_create(s.cache, seq);
    if (status != NULL) {
      kvl_cli_error("kvc_seq_create: %s", kvc_status_message(status));
      kvc_status_free(status);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
  }

  /* The prompt, echoed as run.c does, then prefilled chunk by chunk. */
  for (i = has_bos ? 1 : 0; i < n_prompt; ++i) {
    kvl_cli_print_piece(stdout,
                        kvl_tokenizer_decode(s.tokenizer, i > 0 ? tokens[i - 1] : -1, tokens[i]));
  }
  fflush(stdout);
  t_start = kvl_cli_now();
  for (pos = 0; pos < n_prompt; pos += chunk) {
    int32_t n = n_prompt - pos < chunk ? n_prompt - pos : chunk;
    int32_t positions_buffer[1];
    int32_t *positions = n == 1 ? positions_buffer : (int32_t *)malloc((size_t)n * sizeof(int32_t));
    if (positions == NULL) {
      kvl_cli_error("out of host memory");
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
    for (i = 0; i < n; ++i) positions[i] = pos + i;
    if (kvl_engine_forward(s.engine, 1, &seq, &n, tokens + pos, positions, 0, logits, error,
                           sizeof error) != 0) {
      if (positions != positions_buffer) free(positions);
      kvl_cli_error("%s", error);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
    if (positions != positions_buffer) free(positions);
  }
  t_prefilled = kvl_cli_now();

  /* Decode: pick a token, print it, feed it back. */
  previous = tokens[n_prompt - 1];
  pos = n_prompt;
  while (generated < steps) {
    int32_t one = 1;
    token = sample(logits, vocab, temperature, &rng);
    /* BOS starts the next story; EOS ends this one. */
    if (token == kvl_model_eos(s.model) || (has_bos && token == kvl_model_bos(s.model))) break;
    kvl_cli_print_piece(stdout, kvl_tokenizer_decode(s.tokenizer, previous, token));
    fflush(stdout);
    ++generated;
    previous = token;
    if (generated == steps || pos >= seq_len) break;
    if (kvl_engine_forward(s.engine, 1, &seq, &one, &token, &pos, 0, logits, error, sizeof error) !=
        0) {
      kvl_cli_error("%s", error);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
    ++pos;
    ++decode_steps;
  }
  t_end = kvl_cli_now();
  printf("\n");
  fprintf(stderr, "prefill: %d tokens in %.2f ms (%.0f tokens/s, chunks of %d)\n", (int)n_prompt,
          1e3 * (t_prefilled - t_start), n_prompt / (t_prefilled - t_start), (int)chunk);
  fprintf(stderr, "generated %d tokens; decode: %d steps in %.2f ms, %.1f tokens/s\n",
          (int)generated, (int)decode_steps, 1e3 * (t_end - t_prefilled),
          decode_steps > 0 ? decode_steps / (t_end - t_prefilled) : 0.0);
  kvl_cli_print_cache_stats(stderr, s.cache);
  rc = KVL_EXIT_OK;

done:
  free(logits);
  free(tokens);
  kvl_cli_close(&s);
  return rc;
}
