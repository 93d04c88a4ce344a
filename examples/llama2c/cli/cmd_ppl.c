/* kvc-llama ppl: teacher-forced perplexity of a text, in windows that each start at BOS. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: kvc-llama ppl --model FILE --tokenizer FILE --text FILE [--window N] [--tokens N]\n"
    "                     [--chunk N] [--config FILE]\n"
    "\n"
    "Encodes the text (llama2.c BPE, no BOS), then scores its first tokens: each window is a\n"
    "new sequence [BOS, t0, t1, ...] whose logits at every position predict the next text\n"
    "token, so a window of N positions scores N - 1 tokens. With a policy in --config the\n"
    "cache evicts while the window is processed, which is what the perplexity then measures.\n"
    "\n"
    "  --model FILE       llama2.c version 0 checkpoint\n"
    "  --tokenizer FILE   llama2.c tokenizer file\n"
    "  --text FILE        UTF-8 text\n"
    "  --window N         positions per window, BOS included (default 512; >= 2)\n"
    "  --tokens N         text tokens to score (default: window - 1, one window; 0: all)\n"
    "  --chunk N          feed each window in chunks of N tokens (default: the whole window;\n"
    "                     1 makes every token a decode step)\n"
    "  --config FILE      kvcache YAML (cache:, policy:, ...); the model sets the shape.\n"
    "                     Default: f32 storage, paged layout, no eviction policy\n";

int kvl_cmd_ppl(int argc, char **argv) {
  const char *model_path = NULL, *tokenizer_path = NULL, *text_path = NULL, *config = NULL;
  const char *window_text = NULL, *tokens_text = NULL, *chunk_text = NULL;
  const kvl_cli_option options[] = {
      {"--model", &model_path, NULL},   {"--tokenizer", &tokenizer_path, NULL},
      {"--text", &text_path, NULL},     {"--window", &window_text, NULL},
      {"--tokens", &tokens_text, NULL}, {"--chunk", &chunk_text, NULL},
      {"--config", &config, NULL},
  };
  int32_t window = 512, n_score = -1, chunk = 0, vocab, n_text, seq = 0, scored = 0, windows = 0;
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
  if (tokenizer_path == NULL) {
    return kvl_cli_usage_error(argv[0], usage, "--tokenizer is required");
  }
  if (text_path == NULL) return kvl_cli_usage_error(argv[0], usage, "--text is required");
  if ((rc = kvl_cli_int(argv[0], usage, "--window", window_text, 2, 1L << 24, &window)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--tokens", tokens_text, 0, 2147483647L, &n_score)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--chunk", chunk_text, 1, 1L << 24, &chunk)) != 0) {
    return rc;
  }
  if (chunk == 0 || chunk > window) chunk = window;

  text = kvl_cli_read_text(text_path, &text_size);
  if (text == NULL) return KVL_EXIT_FAILURE;
  if (kvl_cli_open(&s, model_path, tokenizer_path, config) != 0) {
    free(text);
    return KVL_EXIT_FAILURE;
  }
  vocab = kvl_model_config(s.model)->vocab_size;
  if (window > kvl_model_config(s.model)->seq_len) {
    fprintf(stderr, "kvc-llama: note: --window %d is longer than the model's seq_len %d\n",
            (int)window, (int)kvl_model_config(s.model)->seq_len);
  }
  text_tokens = (int32_t *)malloc((text_size + 3) * sizeof(int32_t));
  input = (int32_t *)malloc((size_t)window * sizeof(int32_t));
  positions = (int32_t *)malloc((size_t)window * sizeof(int32_t));
  logits = (float *)malloc((size_t)chunk * (size_t)vocab * sizeof(float));
  if (text_tokens == NULL || input == NULL || positions == NULL || logits == NULL) {
    kvl_cli_error("out of host memory");
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  n_text = kvl_tokenizer_encode(s.tokenizer, text, 0, 0, text_tokens, (int32_t)text_size + 3);
  if (n_text < 1) {
    kvl_cli_error("%s: no tokens to score", text_path);
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  if (n_score < 0) n_score = window - 1;
  if (n_score == 0 || n_score > n_text) n_score = n_text;
  if (kvl_cli_open_engine(&s, chunk) != 0) {
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  kvl_cli_print_cache_config(stderr, s.cache);

  t_start = kvl_cli_now();
  while (scored < n_score) {
    /* Window: input [BOS, t_first .. t_first+n-2] predicts targets t_first .. t_first+n-1. */
    const int32_t first = scored;
    const int32_t n = n_score - scored < window - 1 ? n_score - scored : window - 1;
    int32_t at, i;
    kvc_status *status = kvc_seq_create(s.cache, seq);
    if (status != NULL) {
      kvl_cli_error("kvc_seq_create: %s", kvc_status_message(status));
      kvc_status_free(status);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
    input[0] = 1;
    for (i = 1; i < n; ++i) input[i] = text_tokens[first + i - 1];
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
        const int32_t target = text_tokens[first + at + i];
        double sum = 0.0;
        int32_t j, best = kvl_cli_argmax(row, vocab);
        for (j = 0; j < vocab; ++j) sum += exp((double)row[j] - row[best]);
        nll += log(sum) + row[best] - row[target];
      }
    }
    scored += n;
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
