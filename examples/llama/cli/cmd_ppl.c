/* kvc-llama ppl: teacher-forced perplexity of a text, in windows that each start afresh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: kvc-llama ppl --model FILE [--tokenizer FILE] (--text FILE | --token-ids FILE)\n"
    "                     [--window N] [--tokens N] [--chunk N] [--config FILE]\n"
    "\n"
    "Scores the first tokens of a text: each window is a new sequence whose logits at every\n"
    "position predict the next token, so a window of N positions scores N - 1 tokens. With a\n"
    "model that starts texts with BOS (llama2.c) a window is [BOS, t0, t1, ...]; without one\n"
    "(a GGUF file whose add_bos_token is false) it is [t0, t1, ...], and the next window\n"
    "starts where this one ended. With a policy in --config the cache evicts while the window\n"
    "is processed, which is what the perplexity then measures.\n"
    "\n"
    "  --model FILE       llama2.c version 0 checkpoint or GGUF file (llama architecture)\n"
    "  --tokenizer FILE   llama2.c tokenizer file (default for GGUF: the model's vocabulary)\n"
    "  --text FILE        UTF-8 text, encoded with the tokenizer (no BOS)\n"
    "  --token-ids FILE   the text already encoded: whitespace-separated decimal ids\n"
    "  --window N         positions per window (default 512; >= 2)\n"
    "  --tokens N         tokens to score (default: window - 1, one window; 0: all)\n"
    "  --chunk N          feed each window in chunks of N tokens (default: the whole window;\n"
    "                     1 makes every token a decode step)\n"
    "  --config FILE      kvcache YAML (cache:, policy:, ...); the model sets the shape.\n"
    "                     Default: f32 storage, paged layout, no eviction policy\n";

int kvl_cmd_ppl(int argc, char **argv) {
  const char *model_path = NULL, *tokenizer_path = NULL, *text_path = NULL, *config = NULL;
  const char *ids_path = NULL, *window_text = NULL, *tokens_text = NULL, *chunk_text = NULL;
  const kvl_cli_option options[] = {
      {"--model", &model_path, NULL},    {"--tokenizer", &tokenizer_path, NULL},
      {"--text", &text_path, NULL},      {"--token-ids", &ids_path, NULL},
      {"--window", &window_text, NULL},  {"--tokens", &tokens_text, NULL},
      {"--chunk", &chunk_text, NULL},    {"--config", &config, NULL},
  };
  int32_t window = 512, n_score = -1, chunk = 0, vocab, n_text = 0, seq = 0, scored = 0;
  int32_t windows = 0, bos, consumed = 0;
  int32_t *text_tokens = NULL, *input = NULL, *positions = NULL;
  float *logits = NULL;
  char *text = NULL;
  size_t text_size = 0;
  double nll = 0.0, t_start, t_end;
  kvl_cli_session s;
  char error[1024];
  int rc;

  memset(&s, 0, sizeof s);
  rc = kvl_cli_parse(argc, argv, usage, options, sizeof options / sizeof options[0]);
  if (rc != KVL_EXIT_OK) return rc < 0 ? KVL_EXIT_OK : rc;
  if (model_path == NULL) return kvl_cli_usage_error(argv[0], usage, "--model is required");
  if ((text_path == NULL) == (ids_path == NULL)) {
    return kvl_cli_usage_error(argv[0], usage, "give exactly one of --text and --token-ids");
  }
  if ((rc = kvl_cli_int(argv[0], usage, "--window", window_text, 2, 1L << 24, &window)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--tokens", tokens_text, 0, 2147483647L, &n_score)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--chunk", chunk_text, 1, 1L << 24, &chunk)) != 0) {
    return rc;
  }
  if (chunk == 0 || chunk > window) chunk = window;

  if (text_path != NULL) {
    text = kvl_cli_read_text(text_path, &text_size);
    if (text == NULL) return KVL_EXIT_FAILURE;
  }
  if (kvl_cli_open(&s, model_path, tokenizer_path, config) != 0) {
    free(text);
    return KVL_EXIT_FAILURE;
  }
  vocab = kvl_model_config(s.model)->vocab_size;
  bos = kvl_model_bos(s.model);
  kvl_cli_note_window(s.model, window);
  text_tokens =
      kvl_cli_text_tokens(s.tokenizer, text, text_size, text_path, ids_path, vocab, &n_text);
  if (text_tokens == NULL) {
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  input = (int32_t *)malloc((size_t)window * sizeof(int32_t));
  positions = (int32_t *)malloc((size_t)window * sizeof(int32_t));
  logits = (float *)malloc((size_t)chunk * (size_t)vocab * sizeof(float));
  if (input == NULL || positions == NULL || logits == NULL) {
    kvl_cli_error("out of host memory");
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  /* Without BOS the first token of each window is context only. */
  if (n_text < (bos >= 0 ? 1 : 2)) {
    kvl_cli_error("%s: no tokens to score", text_path != NULL ? text_path : ids_path);
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  if (n_score < 0) n_score = window - 1;
  {
    /* The most the text allows: every token with BOS, all but each window's first without. */
    const int32_t most = bos >= 0 ? n_text : n_text - (n_text + window - 1) / window;
    if (n_score == 0 || n_score > most) n_score = most;
  }
  if (kvl_cli_open_engine(&s, chunk) != 0) {
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  kvl_cli_print_cache_config(stderr, s.cache);

  t_start = kvl_cli_now();
  while (scored < n_score) {
    /* input[i] predicts target[i]: with BOS input = [BOS, x0 .. x(n-2)] and targets x0 ..
     * x(n-1); without, input = x0 .. x(n-1) and targets x1 .. xn (n + 1 tokens consumed). */
    const int32_t n = n_score - scored < window - 1 ? n_score - scored : window - 1;
    const int32_t *x = text_tokens + consumed;
    const int32_t *target = bos >= 0 ? x : x + 1;
    int32_t at, i;
    kvc_status *status = kvc_seq_create(s.cache, seq);
    if (status != NULL) {
      kvl_cli_error("kvc_seq_create: %s", kvc_status_message(status));
      kvc_status_free(status);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
    if (bos >= 0) {
      input[0] = bos;
      for (i = 1; i < n; ++i) input[i] = x[i - 1];
    } else {
      for (i = 0; i < n; ++i) input[i] = x[i];
    }
    for (i = 0; i < n; ++i) positions[i] = i;
    for (at = 0; at < n; at += chunk) {
      int32_t m = n - at < chunk ? n - at : chunk;
      if (kvl_engine_forward(s.engine, 1, &seq, &m, input + at, positions + at, 1, logits, error,
                             sizeof error) != 0) {
        kvl_cli_error("%s", error);
        rc = KVL_EXIT_FAILURE;
        goto done;
      }
      for (i = 0; i < m; ++i) {
        const float *row = logits + (size_t)i * vocab;
        double sum = 0.0;
        int32_t j, best = kvl_cli_argmax(row, vocab);
        for (j = 0; j < vocab; ++j) sum += exp((double)row[j] - row[best]);
        nll += log(sum) + row[best] - row[target[at + i]];
      }
    }
    scored += n;
    consumed += bos >= 0 ? n : n + 1;
    if (scored < n_score) { /* the last window stays, for the counters printed below */
      status = kvc_seq_remove(s.cache, seq);
      if (status != NULL) {
        kvl_cli_error("kvc_seq_remove: %s", kvc_status_message(status));
        kvc_status_free(status);
        rc = KVL_EXIT_FAILURE;
        goto done;
      }
    }
    ++windows;
  }
  t_end = kvl_cli_now();
  printf(
      "perplexity %.4f (mean NLL %.4f nats) over %d tokens in %d window%s of up to %d "
      "positions, chunks of %d\n",
      exp(nll / scored), nll / scored, (int)scored, (int)windows, windows == 1 ? "" : "s",
      (int)window, (int)chunk);
  printf("ppl=%.4f\nnll=%.6f\nscored_tokens=%d\n", exp(nll / scored), nll / scored, (int)scored);
  fprintf(stderr, "%d tokens in %.2f ms (%.0f tokens/s)\n", (int)scored, 1e3 * (t_end - t_start),
          scored / (t_end - t_start));
  kvl_cli_print_cache_stats(stderr, s.cache);
  rc = KVL_EXIT_OK;

done:
  free(logits);
  free(positions);
  free(input);
  free(text_tokens);
  free(text);
  kvl_cli_close(&s);
  return rc;
}
