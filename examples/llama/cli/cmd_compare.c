/*
 * kvc-llama compare: a cache configuration against a baseline configuration in one process,
 * over the windows of `kvc-llama ppl`: the perplexity of both, the KL divergence of the
 * config's next-token distribution from the baseline's, the agreement of their argmax, and,
 * with --generate, the agreement of greedy generation. Standard errors over windows.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: kvc-llama compare --model FILE [--tokenizer FILE] (--text FILE | --token-ids FILE)\n"
    "                         --config FILE [--baseline-config FILE] [--window N] [--tokens N]\n"
    "                         [--chunk N] [--generate N] [--prompt P]\n"
    "\n"
    "Runs a text through two caches side by side, the baseline's and the config's, in the\n"
    "windows of `kvc-llama ppl` with the same --window, --tokens and --chunk (each window a\n"
    "new sequence in each cache, its positions teacher-forced), and compares the next-token\n"
    "distributions p (baseline) and q (config) at every scored position:\n"
    "  perplexity        of each, exp(mean NLL), as `ppl` gives it for that config\n"
    "  NLL difference    mean of NLL_q - NLL_p over the scored tokens (paired)\n"
    "  KL(p || q)        mean over the scored tokens of sum_v p(v) log(p(v) / q(v)), nats\n"
    "  top-1 agreement   share of scored positions where argmax p = argmax q\n"
    "Standard errors take the windows as the independent units (tokens of one window are\n"
    "correlated): the cluster-robust SE over windows, which needs 2 windows or more; the\n"
    "KL's SE over tokens taken as independent is printed too. A perplexity's SE is exp(mean\n"
    "NLL) times the SE of its mean NLL.\n"
    "\n"
    "With --generate N, each window's first P positions are a prompt, prefilled in chunks of\n"
    "--chunk; the baseline then generates N tokens greedily (EOS does not stop it) and the\n"
    "config's cache is fed the same tokens (teacher-forced):\n"
    "  generated agreement  share of the N positions where the config's argmax is the\n"
    "                       baseline's token\n"
    "  identical prefix     tokens before the first disagreement: what the config's own\n"
    "                       free-running greedy generation shares with the baseline's\n"
    "Prints the comparison, then name=value lines (window.K.* for window K alone) on stdout,\n"
    "the two caches and timings on stderr.\n"
    "\n"
    "  --model FILE            llama2.c version 0 checkpoint or GGUF file (llama architecture)\n"
    "  --tokenizer FILE        llama2.c tokenizer file (default for GGUF: the model's vocabulary)\n"
    "  --text FILE             UTF-8 text, encoded with the tokenizer (no BOS)\n"
    "  --token-ids FILE        the text already encoded: whitespace-separated decimal ids\n"
    "  --config FILE           kvcache YAML of the cache under test (as `ppl --config`)\n"
    "  --baseline-config FILE  kvcache YAML of the reference cache (default: `ppl`'s cache\n"
    "                          without --config: f32, paged, no eviction policy)\n"
    "  --window N              positions per window (default 512; >= 2)\n"
    "  --tokens N              tokens to score (default: window - 1, one window; 0: all)\n"
    "  --chunk N               feed each window in chunks of N tokens (default: the whole\n"
    "                          window)\n"
    "  --generate N            greedy tokens to generate from each scored window (default 0)\n"
    "  --prompt P              prompt positions of each generation (default: window - N;\n"
    "                          at most window - 1)\n";

/* One cache under comparison, with its engine and the logits of its last step. */
typedef struct compare_side {
  const char *option; /* "--config" or "--baseline-config", for messages */
  kvc_context *context;
  kvc_cache *cache;
  kvl_engine *engine;
  float *logits; /* [chunk, vocab] */
} compare_side;

/* Sums over one window's scored tokens (or one generation's positions). */
typedef struct window_sums {
  int32_t n;
  double nll_base, nll_config, kl, agree;
} window_sums;

/* An engine for steps of up to `rows` tokens, with logits for as many. */
static int side_open(compare_side *side, const char *option, const kvl_model *model,
                     const char *config_path, int32_t rows, int32_t vocab) {
  char error[1024];
  side->option = option;
  if (kvl_cli_create_cache(model, config_path, option, &side->context, &side->cache, error,
                           sizeof error) != 0 ||
      kvl_engine_create(model, side->cache, rows, &side->engine, error, sizeof error) != 0) {
    kvl_cli_error("%s", error);
    return -1;
  }
  side->logits = (float *)malloc((size_t)rows * (size_t)vocab * sizeof(float));
  if (side->logits == NULL) {
    kvl_cli_error("out of host memory");
    return -1;
  }
  return 0;
}

static void side_close(compare_side *side) {
  free(side->logits);
  kvl_engine_free(side->engine);
  kvc_cache_destroy(side->cache); /* before its context */
  kvc_context_destroy(side->context);
  memset(side, 0, sizeof *side);
}

static int side_seq(compare_side *side, int32_t seq, int create) {
  kvc_status *status =
      create ? kvc_seq_create(side->cache, seq) : kvc_seq_remove(side->cache, seq);
  if (status == NULL) return 0;
  kvl_cli_error("%s: %s: %s", side->option, create ? "kvc_seq_create" : "kvc_seq_remove",
                kvc_status_message(status));
  kvc_status_free(status);
  return -1;
}

/* One step (kvl_engine_forward) into side->logits. */
static int side_forward(compare_side *side, int32_t n_seqs, const int32_t *seq_ids,
                        const int32_t *n_tokens, const int32_t *tokens, const int32_t *positions,
                        int all_logits) {
  char error[1024];
  if (kvl_engine_forward(side->engine, n_seqs, seq_ids, n_tokens, tokens, positions, all_logits,
                         side->logits, error, sizeof error) != 0) {
    kvl_cli_error("%s: %s", side->option, error);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ per-token measures */

/* log sum_v exp(row[v]), stably (max + log sum exp(row - max)) and in double; fills
 * prob[v] = softmax(row)[v] when prob is not NULL. */
static double log_sum_exp(const float *row, int32_t vocab, double *prob) {
  const double max = row[kvl_cli_argmax(row, vocab)];
  double sum = 0.0;
  int32_t v;
  for (v = 0; v < vocab; ++v) {
    const double e = exp((double)row[v] - max);
    if (prob != NULL) prob[v] = e;
    sum += e;
  }
  if (prob != NULL) {
    for (v = 0; v < vocab; ++v) prob[v] /= sum;
  }
  return max + log(sum);
}

/* Adds one position's measures: p from base (its softmax in prob), q from config. */
static void score_position(const float *base, const float *config, int32_t vocab,
                           int32_t target, double *prob, window_sums *sums) {
  const double lse_p = log_sum_exp(base, vocab, prob), lse_q = log_sum_exp(config, vocab, NULL);
  double kl = 0.0;
  int32_t v;
  for (v = 0; v < vocab; ++v) {
    /* log p - log q without forming either: identical rows give exactly 0. */
    if (prob[v] > 0.0) kl += prob[v] * (((double)base[v] - lse_p) - ((double)config[v] - lse_q));
  }
  sums->nll_base += lse_p - base[target];
  sums->nll_config += lse_q - config[target];
  sums->kl += kl;
  sums->agree += kvl_cli_argmax(base, vocab) == kvl_cli_argmax(config, vocab);
  sums->n += 1;
}

/* ------------------------------------------------------------------ statistics */

typedef double (*sum_of)(const window_sums *w);
static double sum_nll_base(const window_sums *w) { return w->nll_base; }
static double sum_nll_config(const window_sums *w) { return w->nll_config; }
static double sum_nll_delta(const window_sums *w) { return w->nll_config - w->nll_base; }
static double sum_kl(const window_sums *w) { return w->kl; }
static double sum_agree(const window_sums *w) { return w->agree; }

/* The mean per token of a window sum over windows w[0, n_windows) and its cluster-robust
 * standard error: sqrt(sum_w (S_w - n_w mean)^2 / N^2 * W / (W - 1)), N the tokens, W the
 * windows; NAN with one window. */
static void cluster_mean(const window_sums *w, int32_t n_windows, sum_of sum, double *mean,
                         double *se) {
  double total = 0.0, tokens = 0.0, var = 0.0;
  int32_t i;
  for (i = 0; i < n_windows; ++i) {
    total += sum(&w[i]);
    tokens += w[i].n;
  }
  *mean = total / tokens;
  for (i = 0; i < n_windows; ++i) {
    const double d = sum(&w[i]) - w[i].n * *mean;
    var += d * d;
  }
  *se = n_windows > 1 ? sqrt(var / (tokens * tokens) * n_windows / (n_windows - 1)) : NAN;
}

/* ------------------------------------------------------------------ the command */

typedef struct compare_run {
  compare_side base, config;
  int32_t vocab, bos, window, chunk, n_score, generate, prompt;
  const int32_t *text;
  int32_t *input, *positions;               /* [window]: one window's input */
  int32_t *seq_ids, *step_tokens, *step_positions, *ones; /* [n_generations]: a decode step */
  int32_t *next_base, *next_config;          /* [n_generations]: each side's argmax */
  double *prob;                              /* [vocab] */
  window_sums *windows, *generations;
  int32_t n_windows, n_generations;
  double kl_sq; /* sum of the squared per-token KL, for its SE over tokens */
  int32_t *prefix; /* [n_generations]: identical prefix of each generation */
} compare_run;

/* The window starting at text[start] (ppl's windows): input[i] predicts target[i], i < n. */
static void window_input(const compare_run *r, int32_t start, int32_t n, const int32_t **target) {
  const int32_t *x = r->text + start;
  int32_t i;
  if (r->bos >= 0) {
    r->input[0] = r->bos;
    for (i = 1; i < n; ++i) r->input[i] = x[i - 1];
  } else {
    for (i = 0; i < n; ++i) r->input[i] = x[i];
  }
  for (i = 0; i < n; ++i) r->positions[i] = i;
  *target = r->bos >= 0 ? x : x + 1;
}

static int both_seq(compare_run *r, int32_t seq, int create) {
  return side_seq(&r->base, seq, create) != 0 || side_seq(&r->config, seq, create) != 0 ? -1 : 0;
}

/* n positions of r->input (from r->positions[0]) as sequence seq of both sides, in chunks;
 * each chunk's logits (all of them with all_logits) are then in side->logits. on_chunk, when
 * not NULL, is called after each chunk with its first position and length. */
static int both_prefill(compare_run *r, int32_t seq, int32_t n, int all_logits,
                        void (*on_chunk)(compare_run *, int32_t at, int32_t m, void *),
                        void *arg) {
  int32_t at;
  for (at = 0; at < n; at += r->chunk) {
    const int32_t m = n - at < r->chunk ? n - at : r->chunk;
    if (side_forward(&r->base, 1, &seq, &m, r->input + at, r->positions + at, all_logits) != 0 ||
        side_forward(&r->config, 1, &seq, &m, r->input + at, r->positions + at, all_logits) !=
            0) {
      return -1;
    }
    if (on_chunk != NULL) on_chunk(r, at, m, arg);
  }
  return 0;
}

typedef struct score_target {
  const int32_t *target;
  window_sums *sums;
} score_target;

static void score_chunk(compare_run *r, int32_t at, int32_t m, void *arg) {
  const score_target *t = (const score_target *)arg;
  int32_t i;
  for (i = 0; i < m; ++i) {
    const size_t row = (size_t)i * r->vocab;
    const double kl_before = t->sums->kl;
    score_position(r->base.logits + row, r->config.logits + row, r->vocab, t->target[at + i],
                   r->prob, t->sums);
    r->kl_sq += (t->sums->kl - kl_before) * (t->sums->kl - kl_before);
  }
}

/* Scores one window of n positions starting at text[start] into *sums. */
static int score_window(compare_run *r, int32_t start, int32_t n, window_sums *sums) {
  score_target t;
  t.sums = sums;
  window_input(r, start, n, &t.target);
  if (both_seq(r, 0, 1) != 0 || both_prefill(r, 0, n, 1, score_chunk, &t) != 0) return -1;
  return both_seq(r, 0, 0);
}

/* Generations g < n_generations, each from the first P positions of the window at
 * text[starts[g]], as sequence g of both sides, decoded in one batch: the baseline generates
 * greedily, the config is fed its tokens; counts agreements and sets the identical prefixes. */
static int generate_all(compare_run *r, const int32_t *starts) {
  const int32_t n = r->n_generations;
  int32_t g, step;
  for (g = 0; g < n; ++g) {
    const int32_t *target;
    window_input(r, starts[g], r->prompt, &target);
    if (both_seq(r, g, 1) != 0 || both_prefill(r, g, r->prompt, 0, NULL, NULL) != 0) return -1;
    r->next_base[g] = kvl_cli_argmax(r->base.logits, r->vocab);
    r->next_config[g] = kvl_cli_argmax(r->config.logits, r->vocab);
    r->prefix[g] = -1;
    r->seq_ids[g] = g;
    r->ones[g] = 1;
  }
  for (step = 0; step < r->generate; ++step) {
    for (g = 0; g < n; ++g) {
      if (r->next_config[g] == r->next_base[g]) {
        r->generations[g].agree += 1;
      } else if (r->prefix[g] < 0) {
        r->prefix[g] = step;
      }
      r->generations[g].n += 1;
      r->step_tokens[g] = r->next_base[g];
      r->step_positions[g] = r->prompt + step;
    }
    if (step + 1 == r->generate) break;
    if (side_forward(&r->base, n, r->seq_ids, r->ones, r->step_tokens, r->step_positions, 0) !=
            0 ||
        side_forward(&r->config, n, r->seq_ids, r->ones, r->step_tokens, r->step_positions, 0) !=
            0) {
      return -1;
    }
    for (g = 0; g < n; ++g) {
      r->next_base[g] = kvl_cli_argmax(r->base.logits + (size_t)g * r->vocab, r->vocab);
      r->next_config[g] = kvl_cli_argmax(r->config.logits + (size_t)g * r->vocab, r->vocab);
    }
  }
  for (g = 0; g < n; ++g) {
    if (r->prefix[g] < 0) r->prefix[g] = r->generate;
    if (both_seq(r, g, 0) != 0) return -1;
  }
  return 0;
}

static void print_se(const char *format, double se) {
  if (isnan(se)) {
    printf(" +- n/a");
  } else {
    printf(format, se);
  }
}

static void report(const compare_run *r, const char *base_name, const char *config_name) {
  double nll_b, se_b, nll_c, se_c, delta, se_delta, kl, se_kl, top1, se_top1, se_kl_tokens;
  int32_t tokens = 0, i;
  for (i = 0; i < r->n_windows; ++i) tokens += r->windows[i].n;
  cluster_mean(r->windows, r->n_windows, sum_nll_base, &nll_b, &se_b);
  cluster_mean(r->windows, r->n_windows, sum_nll_config, &nll_c, &se_c);
  cluster_mean(r->windows, r->n_windows, sum_nll_delta, &delta, &se_delta);
  cluster_mean(r->windows, r->n_windows, sum_kl, &kl, &se_kl);
  cluster_mean(r->windows, r->n_windows, sum_agree, &top1, &se_top1);
  se_kl_tokens = tokens > 1 ? sqrt((r->kl_sq / tokens - kl * kl) / (tokens - 1)) : NAN;

  printf("%d tokens in %d window%s of up to %d positions, chunks of %d; standard errors over "
         "windows\n",
         (int)tokens, (int)r->n_windows, r->n_windows == 1 ? "" : "s", (int)r->window,
         (int)r->chunk);
  printf("baseline %s: perplexity %.4f", base_name, exp(nll_b));
  print_se(" +- %.4f", exp(nll_b) * se_b);
  printf(" (mean NLL %.4f nats)\n", nll_b);
  printf("config   %s: perplexity %.4f", config_name, exp(nll_c));
  print_se(" +- %.4f", exp(nll_c) * se_c);
  printf(" (mean NLL %.4f nats)\n", nll_c);
  printf("config - baseline: NLL %+.6f", delta);
  print_se(" +- %.6f", se_delta);
  printf(" nats (perplexity %+.2f%%)\n", 100.0 * (exp(delta) - 1.0));
  printf("KL(baseline || config): %.6g", kl);
  print_se(" +- %.3g", se_kl);
  printf(" nats per token (SE over tokens as if independent: %.3g)\n", se_kl_tokens);
  printf("top-1 agreement: %.4f", top1);
  print_se(" +- %.4f", se_top1);
  printf("\n");

  printf("baseline.ppl=%.4f\nbaseline.ppl_se=%.4f\nbaseline.nll=%.6f\n", exp(nll_b),
         exp(nll_b) * se_b, nll_b);
  printf("config.ppl=%.4f\nconfig.ppl_se=%.4f\nconfig.nll=%.6f\n", exp(nll_c), exp(nll_c) * se_c,
         nll_c);
  printf("nll_delta=%.6f\nnll_delta_se=%.6f\n", delta, se_delta);
  /* %g: a KL of exactly 0 prints as 0, a small one keeps its digits. */
  printf("kl=%.6g\nkl_se=%.6g\nkl_se_tokens=%.6g\n", kl, se_kl, se_kl_tokens);
  printf("top1_agreement=%.6f\ntop1_agreement_se=%.6f\n", top1, se_top1);
  printf("scored_tokens=%d\nwindows=%d\n", (int)tokens, (int)r->n_windows);
  for (i = 0; i < r->n_windows; ++i) {
    const window_sums *w = &r->windows[i];
    printf("window.%d.baseline_nll=%.6f\nwindow.%d.config_nll=%.6f\nwindow.%d.kl=%.6g\n"
           "window.%d.top1_agreement=%.6f\n",
           (int)i, w->nll_base / w->n, (int)i, w->nll_config / w->n, (int)i, w->kl / w->n,
           (int)i, w->agree / w->n);
  }

  if (r->n_generations > 0) {
    double agree, se_agree, prefix_mean = 0.0, prefix_var = 0.0, prefix_se;
    int32_t identical = 0, prefix_min = r->generate;
    cluster_mean(r->generations, r->n_generations, sum_agree, &agree, &se_agree);
    for (i = 0; i < r->n_generations; ++i) {
      prefix_mean += r->prefix[i];
      identical += r->prefix[i] == r->generate;
      if (r->prefix[i] < prefix_min) prefix_min = r->prefix[i];
    }
    prefix_mean /= r->n_generations;
    for (i = 0; i < r->n_generations; ++i) {
      prefix_var += (r->prefix[i] - prefix_mean) * (r->prefix[i] - prefix_mean);
    }
    prefix_se = r->n_generations > 1
                    ? sqrt(prefix_var / (r->n_generations - 1) / r->n_generations)
                    : NAN;
    printf("generated agreement (teacher-forced on the baseline's greedy tokens): %.4f", agree);
    print_se(" +- %.4f", se_agree);
    printf(" over %d generation%s of %d tokens after %d prompt positions\n",
           (int)r->n_generations, r->n_generations == 1 ? "" : "s", (int)r->generate,
           (int)r->prompt);
    printf("identical prefix (free-running greedy): %.1f", prefix_mean);
    print_se(" +- %.1f", prefix_se);
    printf(" tokens of %d on average, shortest %d; %d of %d generation%s identical throughout\n",
           (int)r->generate, (int)prefix_min, (int)identical, (int)r->n_generations,
           r->n_generations == 1 ? "" : "s");
    printf("generate.tokens=%d\ngenerate.prompt=%d\ngenerate.runs=%d\n", (int)r->generate,
           (int)r->prompt, (int)r->n_generations);
    printf("generate.agreement=%.6f\ngenerate.agreement_se=%.6f\n", agree, se_agree);
    printf("generate.prefix_mean=%.2f\ngenerate.prefix_se=%.2f\ngenerate.prefix_min=%d\n",
           prefix_mean, prefix_se, (int)prefix_min);
    printf("generate.identical_runs=%d\n", (int)identical);
    for (i = 0; i < r->n_generations; ++i) {
      printf("window.%d.generate_agreement=%.6f\nwindow.%d.generate_prefix=%d\n", (int)i,
             r->generations[i].agree / r->generations[i].n, (int)i, (int)r->prefix[i]);
    }
  }
}

int kvl_cmd_compare(int argc, char **argv) {
  const char *model_path = NULL, *tokenizer_path = NULL, *text_path = NULL, *config = NULL;
  const char *ids_path = NULL, *window_text = NULL, *tokens_text = NULL, *chunk_text = NULL;
  const char *baseline = NULL, *generate_text = NULL, *prompt_text = NULL;
  const kvl_cli_option options[] = {
      {"--model", &model_path, NULL},       {"--tokenizer", &tokenizer_path, NULL},
      {"--text", &text_path, NULL},         {"--token-ids", &ids_path, NULL},
      {"--window", &window_text, NULL},     {"--tokens", &tokens_text, NULL},
      {"--chunk", &chunk_text, NULL},       {"--config", &config, NULL},
      {"--baseline-config", &baseline, NULL}, {"--generate", &generate_text, NULL},
      {"--prompt", &prompt_text, NULL},
  };
  int32_t n_text = 0, scored = 0, consumed = 0, n_starts = 0;
  int32_t *text_tokens = NULL, *starts = NULL;
  char *text = NULL;
  size_t text_size = 0;
  kvl_cli_session s; /* its model and tokenizer; each side has its own cache */
  compare_run r;
  double t_start;
  int rc;

  memset(&s, 0, sizeof s);
  memset(&r, 0, sizeof r);
  r.window = 512;
  r.n_score = -1;
  r.prompt = -1;
  rc = kvl_cli_parse(argc, argv, usage, options, sizeof options / sizeof options[0]);
  if (rc != KVL_EXIT_OK) return rc < 0 ? KVL_EXIT_OK : rc;
  if (model_path == NULL) return kvl_cli_usage_error(argv[0], usage, "--model is required");
  if (config == NULL) return kvl_cli_usage_error(argv[0], usage, "--config is required");
  if ((text_path == NULL) == (ids_path == NULL)) {
    return kvl_cli_usage_error(argv[0], usage, "give exactly one of --text and --token-ids");
  }
  if ((rc = kvl_cli_int(argv[0], usage, "--window", window_text, 2, 1L << 24, &r.window)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--tokens", tokens_text, 0, 2147483647L, &r.n_score)) !=
          0 ||
      (rc = kvl_cli_int(argv[0], usage, "--chunk", chunk_text, 1, 1L << 24, &r.chunk)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--generate", generate_text, 0, 1L << 24, &r.generate)) !=
          0 ||
      (rc = kvl_cli_int(argv[0], usage, "--prompt", prompt_text, 1, 1L << 24, &r.prompt)) != 0) {
    return rc;
  }
  if (r.chunk == 0 || r.chunk > r.window) r.chunk = r.window;
  if (r.generate > 0) {
    if (r.prompt < 0) r.prompt = r.window - r.generate;
    if (r.prompt < 1 || r.prompt > r.window - 1) {
      return kvl_cli_usage_error(argv[0], usage,
                                 "the prompt of each generation must have 1 to %d (window - 1) "
                                 "positions, got %d (give --prompt)",
                                 (int)r.window - 1, (int)r.prompt);
    }
  } else if (prompt_text != NULL) {
    return kvl_cli_usage_error(argv[0], usage, "--prompt needs --generate");
  }

  if (text_path != NULL) {
    text = kvl_cli_read_text(text_path, &text_size);
    if (text == NULL) return KVL_EXIT_FAILURE;
  }
  {
    char error[1024];
    tokenizer_path = kvl_cli_tokenizer_path(model_path, tokenizer_path);
    if (tokenizer_path == NULL ||
        kvl_model_load(model_path, &s.model, error, sizeof error) != 0 ||
        kvl_tokenizer_load(tokenizer_path, kvl_model_config(s.model)->vocab_size, &s.tokenizer,
                           error, sizeof error) != 0) {
      if (tokenizer_path != NULL) kvl_cli_error("%s", error);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
  }
  r.vocab = kvl_model_config(s.model)->vocab_size;
  r.bos = kvl_model_bos(s.model);
  kvl_cli_note_window(s.model, r.window);
  text_tokens =
      kvl_cli_text_tokens(s.tokenizer, text, text_size, text_path, ids_path, r.vocab, &n_text);
  if (text_tokens == NULL || n_text < (r.bos >= 0 ? 1 : 2)) {
    if (text_tokens != NULL)
      kvl_cli_error("%s: no tokens to score", text_path != NULL ? text_path : ids_path);
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  if (r.n_score < 0) r.n_score = r.window - 1;
  {
    /* As in ppl: every token with BOS, all but each window's first without. */
    const int32_t most = r.bos >= 0 ? n_text : n_text - (n_text + r.window - 1) / r.window;
    if (r.n_score == 0 || r.n_score > most) r.n_score = most;
  }
  n_starts = (r.n_score + r.window - 2) / (r.window - 1);
  /* Steps of a chunk of one window, or of one token of every generation. */
  if (side_open(&r.base, "--baseline-config", s.model, baseline,
                r.chunk > n_starts ? r.chunk : n_starts, r.vocab) != 0 ||
      side_open(&r.config, "--config", s.model, config, r.chunk > n_starts ? r.chunk : n_starts,
                r.vocab) != 0) {
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  r.text = text_tokens;
  r.input = (int32_t *)malloc((size_t)r.window * sizeof(int32_t));
  r.positions = (int32_t *)malloc((size_t)r.window * sizeof(int32_t));
  r.prob = (double *)malloc((size_t)r.vocab * sizeof(double));
  r.windows = (window_sums *)calloc((size_t)n_starts, sizeof(window_sums));
  r.generations = (window_sums *)calloc((size_t)n_starts, sizeof(window_sums));
  r.prefix = (int32_t *)calloc((size_t)n_starts, sizeof(int32_t));
  starts = (int32_t *)malloc((size_t)n_starts * sizeof(int32_t));
  r.seq_ids = (int32_t *)malloc((size_t)n_starts * sizeof(int32_t));
  r.ones = (int32_t *)malloc((size_t)n_starts * sizeof(int32_t));
  r.step_tokens = (int32_t *)malloc((size_t)n_starts * sizeof(int32_t));
  r.step_positions = (int32_t *)malloc((size_t)n_starts * sizeof(int32_t));
  r.next_base = (int32_t *)malloc((size_t)n_starts * sizeof(int32_t));
  r.next_config = (int32_t *)malloc((size_t)n_starts * sizeof(int32_t));
  if (r.input == NULL || r.positions == NULL || r.prob == NULL || r.windows == NULL ||
      r.generations == NULL || r.prefix == NULL || starts == NULL || r.seq_ids == NULL ||
      r.ones == NULL || r.step_tokens == NULL || r.step_positions == NULL ||
      r.next_base == NULL || r.next_config == NULL) {
    kvl_cli_error("out of host memory");
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  fprintf(stderr, "baseline: ");
  kvl_cli_print_cache_config(stderr, r.base.cache);
  fprintf(stderr, "config:   ");
  kvl_cli_print_cache_config(stderr, r.config.cache);

  t_start = kvl_cli_now();
  while (scored < r.n_score) {
    const int32_t n = r.n_score - scored < r.window - 1 ? r.n_score - scored : r.window - 1;
    starts[r.n_windows] = consumed;
    if (score_window(&r, consumed, n, &r.windows[r.n_windows]) != 0) {
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
    ++r.n_windows;
    scored += n;
    consumed += r.bos >= 0 ? n : n + 1;
  }
  fprintf(stderr, "%d tokens scored in %.2f s\n", (int)scored, kvl_cli_now() - t_start);
  if (r.generate > 0) {
    t_start = kvl_cli_now();
    /* A last window shorter than the prompt may end with the text. */
    while (r.n_generations < r.n_windows &&
           (int64_t)starts[r.n_generations] + (r.bos >= 0 ? r.prompt - 1 : r.prompt) <= n_text) {
      ++r.n_generations;
    }
    if (generate_all(&r, starts) != 0) {
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
    fprintf(stderr, "%d x %d tokens generated in %.2f s\n", (int)r.n_generations,
            (int)r.generate, kvl_cli_now() - t_start);
  }
  report(&r, baseline != NULL ? baseline : "(f32, no policy)", config);
  rc = KVL_EXIT_OK;

done:
  free(r.next_config);
  free(r.next_base);
  free(r.step_positions);
  free(r.step_tokens);
  free(r.ones);
  free(r.seq_ids);
  free(starts);
  free(r.prefix);
  free(r.generations);
  free(r.windows);
  free(r.prob);
  free(r.positions);
  free(r.input);
  side_close(&r.config);
  side_close(&r.base);
  free(text_tokens);
  free(text);
  kvl_cli_close(&s);
  return rc;
}
