/*
 * kvc-llama eval: the quality report. For every eviction policy and budget it measures
 *   (a) the perplexity of text windows decoded one token at a time while the cache compresses
 *       after every step, and
 *   (b) the NLL of a continuation after a prompt compressed during prefill (after every chunk,
 *       or once when prefill ends),
 * each against the full cache. docs/quality_results.md shows the report for SmolLM2-135M.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcache/kvcache_format.h>

#include "cli.h"

/* Tokens scored after the prompt in (b); the prompt is the rest of the window. */
#define EVAL_CONTINUATION 64
#define EVAL_MAX_BUDGETS 16
#define EVAL_MAX_POLICIES 64

static const char usage[] =
    "usage: kvc-llama eval --model FILE [--tokenizer FILE] (--text FILE | --token-ids FILE)\n"
    "                      [--windows N] [--prompt P] [--policies a,b,...]\n"
    "                      [--budgets r1,r2,...] [--chunk N] [--skip-decode | --skip-prefill]\n"
    "                      [--csv FILE] [--markdown FILE] [--skip S]\n"
    "                      [--dtype F] [--full-dtype F] [--demote F [--demote-keep R]]\n"
    "\n"
    "Quality of every eviction policy at every budget, against the full cache. The text\n"
    "from its token S on (--skip, default 0) is cut into N windows of W = P + 64 positions.\n"
    "With a model that starts texts with BOS (llama2.c) window k is [BOS, t(S + k*(W-1)),\n"
    "..., t(S + k*(W-1) + W-2)]; without one (a GGUF model whose add_bos_token is false) it\n"
    "is [t(S + k*W), ..., t(S + k*W + W-1)]: with S = 0 the windows of\n"
    "`ppl --window W --tokens N*(W-1)`. Each token is predicted from the positions before\n"
    "it. All windows run as one batch; the numbers are averaged over them, and every\n"
    "difference from the full cache comes with its standard error (windows as clusters).\n"
    "\n"
    "  (a) perplexity (unless --skip-decode): each window is fed one token at a time\n"
    "      (W - 1 decode steps, W - 1\n"
    "      scored tokens); the cache compresses after every step (decode_every 1) any\n"
    "      (layer, KV head) holding more than budget = round(r * W) tokens, so attention\n"
    "      sees at most budget + 1 tokens. perplexity = exp(mean NLL).\n"
    "  (b) continuation NLL: the first P = W - 64 positions of each window (BOS + P - 1 text\n"
    "      tokens) are prefilled in chunks of --chunk tokens and compressed to budget =\n"
    "      round(r * P) tokens either after every chunk (per_chunk) or once, when the first\n"
    "      decode token arrives (once); then the window's last 64 tokens are teacher-forced\n"
    "      one at a time without further compression (decode_every 0). Reported: their\n"
    "      mean NLL in nats (the first is predicted by the prompt's last logits).\n"
    "\n"
    "Policies use their documented defaults (docs/policies.md); where a default protected\n"
    "window (sinks + recent) would not fit inside a budget, recent and sinks are set to\n"
    "half the budget at most (a note says so). The full cache is the same procedure with no\n"
    "policy, in --dtype too unless --full-dtype says otherwise. \"held\" is what a (window,\n"
    "layer, KV head) holds at the end, mean over them, in tokens and in bytes (the cache's\n"
    "bytes_used). Prints tables and name=value lines on stdout, progress on stderr.\n"
    "\n"
    "  --model FILE       llama2.c version 0 checkpoint or GGUF file (llama architecture)\n"
    "  --tokenizer FILE   llama2.c tokenizer file (default for GGUF: the model's vocabulary)\n"
    "  --text FILE        UTF-8 text with at least S + N * W tokens\n"
    "  --token-ids FILE   the text already encoded: whitespace-separated decimal ids\n"
    "  --windows N        windows to average over (default 4)\n"
    "  --skip S           the windows start after the text's first S tokens (default 0);\n"
    "                     e.g. past the part of a text used to choose settings\n"
    "  --prompt P         prompt positions in (b) (default: min(context, 512) - 64)\n"
    "  --skip-decode      leave out (a), the slow part with long windows\n"
    "  --skip-prefill     leave out (b)\n"
    "  --policies LIST    comma-separated policy plugins (default: full,window,streaming,\n"
    "                     h2o,tova,snapkv,pyramidkv,adakv,knorm,keydiff,random)\n"
    "  --budgets LIST     comma-separated budget ratios in (0, 1] (default 0.125,0.25,0.5)\n"
    "  --chunk N          prefill chunk in (b), >= 2 (default 64); a last chunk of one\n"
    "                     token is merged into the one before it\n"
    "  --csv FILE         also write the results as CSV, one row per (policy, budget)\n"
    "  --markdown FILE    also write the tables as Markdown\n" KVL_CLI_STORAGE_USAGE
    "  --retrieval        the pass-key retrieval test instead (--retrieval --help)\n";

static const char *const default_policies[] = {"full",   "window",    "streaming", "h2o",
                                               "tova",   "snapkv",    "pyramidkv", "adakv",
                                               "knorm",  "keydiff",   "random"};

/* One cache configuration: a policy (NULL: full cache), its budget and triggers. */
typedef struct eval_setup {
  const char *policy;
  int32_t budget, sinks, recent; /* sinks / recent < 0: the policy's default */
  kvc_prefill_compression prefill;
  int32_t decode_every;
} eval_setup;

typedef struct eval_result {
  double nll;        /* mean NLL (nats) of the scored tokens */
  double held;       /* tokens held at the end, mean over (window, layer, KV head) */
  double held_bytes; /* the cache's bytes_used at the end, per (window, layer, KV head) */
  double *token_nll; /* [windows, per_window]: each scored token's NLL */
  int32_t per_window;
} eval_result;

/* One (policy, budget) row of the report. */
typedef struct eval_row {
  const char *policy;
  double ratio;
  int32_t budget_decode, budget_prompt;
  int32_t sinks_decode, recent_decode, sinks_prompt, recent_prompt; /* in effect */
  int explicit_decode, explicit_prompt; /* eval set them (the defaults did not fit) */
  eval_result decode, per_chunk, once;
} eval_row;

typedef struct eval_state {
  kvl_model *model;
  kvl_tokenizer *tokenizer;
  kvc_context *context;
  int32_t vocab, n_windows, window, prompt, chunk, skip_decode, skip_prefill, skip;
  kvl_cli_storage storage;
  int32_t *windows; /* [n_windows, window]: BOS then window - 1 text tokens */
  int32_t *tokens, *positions, *n_tokens, *seq_ids; /* one step's batch */
  float *logits;                                     /* [n_windows, vocab] */
} eval_state;

static int fail_status(kvc_status *status, const char *what) {
  kvl_cli_error("%s: %s: %s", what, kvc_status_code_name(kvc_status_get_code(status)),
                kvc_status_message(status));
  kvc_status_free(status);
  return -1;
}

/* -log softmax(row)[target], in double as in `ppl`. */
static double token_nll(const float *row, int32_t vocab, int32_t target) {
  int32_t j, best = kvl_cli_argmax(row, vocab);
  double sum = 0.0;
  for (j = 0; j < vocab; ++j) sum += exp((double)row[j] - row[best]);
  return log(sum) + row[best] - row[target];
}

/* A cache configured by `setup`, an engine on it and one sequence per window. */
static int eval_open(eval_state *st, const eval_setup *setup, kvc_cache **out_cache,
                     kvl_engine **out_engine) {
  kvc_cache_params p;
  kvc_cache *cache = NULL;
  kvl_engine *engine = NULL;
  kvc_status *status;
  char error[1024];
  int32_t i;

  kvl_cache_params_for(st->model, &p);
  kvl_cli_storage_apply(&st->storage, setup->policy != NULL, &p);
  if (setup->policy != NULL) {
    p.policy = setup->policy;
    p.budget = setup->budget;
    p.sinks = setup->sinks;
    p.recent = setup->recent;
    p.prefill = setup->prefill;
    p.decode_every = setup->decode_every;
  }
  status = kvc_cache_create(st->context, &p, &cache);
  if (status != NULL) return fail_status(status, "kvc_cache_create");
  if (kvl_engine_create(st->model, cache, st->n_windows * (st->chunk + 1), &engine, error,
                        sizeof error) != 0) {
    kvl_cli_error("%s", error);
    kvc_cache_destroy(cache);
    return -1;
  }
  for (i = 0; i < st->n_windows; ++i) {
    status = kvc_seq_create(cache, i);
    if (status != NULL) {
      kvl_engine_free(engine);
      kvc_cache_destroy(cache);
      return fail_status(status, "kvc_seq_create");
    }
  }
  *out_cache = cache;
  *out_engine = engine;
  return 0;
}

/* What each (window, layer, KV head) holds at the end, mean over them: tokens and bytes. */
static void read_held(const eval_state *st, const kvc_cache *cache, eval_result *out) {
  const kvl_config *c = kvl_model_config(st->model);
  const double heads = (double)st->n_windows * c->n_layers * c->n_kv_heads;
  kvc_cache_stats stats;
  if (kvl_cli_read_stats(cache, &stats) != 0) {
    out->held = out->held_bytes = NAN;
    return;
  }
  out->held = (double)stats.tokens_stored / heads;
  out->held_bytes = (double)stats.bytes_used / heads;
}

/* Room for every scored token's NLL: n_windows rows of per_window. */
static int result_alloc(const eval_state *st, eval_result *out, int32_t per_window) {
  free(out->token_nll);
  out->per_window = per_window;
  out->token_nll = (double *)calloc((size_t)st->n_windows * per_window, sizeof(double));
  if (out->token_nll == NULL) {
    kvl_cli_error("out of host memory");
    return -1;
  }
  return 0;
}

static double result_mean(const eval_state *st, const eval_result *r) {
  const size_t n = (size_t)st->n_windows * r->per_window;
  double sum = 0.0;
  size_t i;
  for (i = 0; i < n; ++i) sum += r->token_nll[i];
  return sum / (double)n;
}

/* One decode step of every window at position `pos`; stores the NLL of each window's next
 * token as its scored token `index`. */
static int decode_step(eval_state *st, kvl_engine *engine, int32_t pos, eval_result *out,
                       int32_t index) {
  char error[1024];
  int32_t s;
  for (s = 0; s < st->n_windows; ++s) {
    st->tokens[s] = st->windows[(size_t)s * st->window + pos];
    st->positions[s] = pos;
    st->n_tokens[s] = 1;
  }
  if (kvl_engine_forward(engine, st->n_windows, st->seq_ids, st->n_tokens, st->tokens,
                         st->positions, 0, st->logits, error, sizeof error) != 0) {
    kvl_cli_error("%s", error);
    return -1;
  }
  for (s = 0; s < st->n_windows; ++s) {
    out->token_nll[(size_t)s * out->per_window + index] =
        token_nll(st->logits + (size_t)s * st->vocab, st->vocab,
                  st->windows[(size_t)s * st->window + pos + 1]);
  }
  return 0;
}

/* (a): every window one token at a time from BOS; scores W - 1 tokens per window. */
static int run_decode(eval_state *st, const eval_setup *setup, eval_result *out) {
  kvc_cache *cache;
  kvl_engine *engine;
  int32_t pos;
  if (result_alloc(st, out, st->window - 1) != 0) return -1;
  if (eval_open(st, setup, &cache, &engine) != 0) return -1;
  for (pos = 0; pos + 1 < st->window; ++pos) {
    if (decode_step(st, engine, pos, out, pos) != 0) {
      kvl_engine_free(engine);
      kvc_cache_destroy(cache);
      return -1;
    }
  }
  out->nll = result_mean(st, out);
  read_held(st, cache, out);
  kvl_engine_free(engine);
  kvc_cache_destroy(cache);
  return 0;
}

/* (b): prefill the first P positions in chunks, then teacher-force the rest; scores the
 * window's last W - P tokens. */
static int run_prefill(eval_state *st, const eval_setup *setup, eval_result *out) {
  kvc_cache *cache;
  kvl_engine *engine;
  char error[1024];
  int32_t at = 0, pos, s, j;
  if (result_alloc(st, out, st->window - st->prompt) != 0) return -1;
  if (eval_open(st, setup, &cache, &engine) != 0) return -1;
  while (at < st->prompt) {
    int32_t m = st->prompt - at < st->chunk ? st->prompt - at : st->chunk;
    if (st->prompt - at - m == 1) ++m; /* a one-token chunk would count as a decode step */
    for (s = 0; s < st->n_windows; ++s) {
      for (j = 0; j < m; ++j) {
        st->tokens[s * m + j] = st->windows[(size_t)s * st->window + at + j];
        st->positions[s * m + j] = at + j;
      }
      st->n_tokens[s] = m;
    }
    if (kvl_engine_forward(engine, st->n_windows, st->seq_ids, st->n_tokens, st->tokens,
                           st->positions, 0, st->logits, error, sizeof error) != 0) {
      kvl_cli_error("%s", error);
      goto fail;
    }
    at += m;
  }
  for (s = 0; s < st->n_windows; ++s) { /* the prompt's last logits predict position P */
    out->token_nll[(size_t)s * out->per_window] =
        token_nll(st->logits + (size_t)s * st->vocab, st->vocab,
                  st->windows[(size_t)s * st->window + st->prompt]);
  }
  for (pos = st->prompt; pos + 1 < st->window; ++pos) {
    if (decode_step(st, engine, pos, out, pos - st->prompt + 1) != 0) goto fail;
  }
  out->nll = result_mean(st, out);
  read_held(st, cache, out);
  kvl_engine_free(engine);
  kvc_cache_destroy(cache);
  return 0;
fail:
  kvl_engine_free(engine);
  kvc_cache_destroy(cache);
  return -1;
}

/* The sinks and recent tokens `policy` protects at `budget` by default, as the library
 * reports them for a cache created with it (kvc_cache_policy_info). */
static int policy_defaults(const eval_state *st, const char *policy, int32_t budget,
                           int32_t *sinks, int32_t *recent) {
  kvc_cache_params p;
  kvc_cache *cache = NULL;
  kvc_policy_info info;
  kvc_status *status;
  kvl_cache_params_for(st->model, &p);
  kvl_cli_storage_apply(&st->storage, 1, &p);
  p.policy = policy;
  p.budget = budget;
  status = kvc_cache_create(st->context, &p, &cache);
  if (status != NULL) return fail_status(status, "kvc_cache_create");
  kvc_policy_info_init(&info);
  status = kvc_cache_policy_info(cache, &info);
  if (status == NULL) {
    *sinks = info.sinks;
    *recent = info.recent;
  }
  kvc_cache_destroy(cache);
  return status != NULL ? fail_status(status, "kvc_cache_policy_info") : 0;
}

/* Sinks and recent for `policy` at `budget`: *explicit_ = 0 and the policy's defaults unless
 * the default protected window does not fit inside the budget; then recent = min(default,
 * budget / 2) and sinks = min(default, budget / 2 - recent), *explicit_ = 1, with a note. */
static int protected_for(const eval_state *st, const char *policy, int32_t budget,
                         const char *what, int32_t *sinks, int32_t *recent, int *explicit_) {
  int32_t d_sinks, d_recent;
  if (policy_defaults(st, policy, budget, &d_sinks, &d_recent) != 0) return -1;
  *sinks = d_sinks;
  *recent = d_recent;
  *explicit_ = 0;
  if (d_sinks + d_recent < budget) return 0;
  *recent = d_recent < budget / 2 ? d_recent : budget / 2;
  *sinks = d_sinks < budget / 2 - *recent ? d_sinks : budget / 2 - *recent;
  *explicit_ = 1;
  fprintf(stderr,
          "kvc-llama eval: note: %s at %s budget %d: default sinks %d + recent %d do not fit; "
          "using sinks %d, recent %d\n",
          policy, what, (int)budget, (int)d_sinks, (int)d_recent, (int)*sinks, (int)*recent);
  return 0;
}

/* Splits a comma-separated list in place. Returns the number of items, or -1 if one is empty
 * or there are more than max. */
static int split_list(char *text, char **items, int max) {
  int n = 0;
  char *item = text;
  for (;;) {
    char *comma = strchr(item, ',');
    if (comma != NULL) *comma = '\0';
    if (*item == '\0' || n == max) return -1;
    items[n++] = item;
    if (comma == NULL) return n;
    item = comma + 1;
  }
}

static int policy_loaded(const kvc_context *context, const char *name) {
  size_t i, n = kvc_context_plugin_count(context);
  for (i = 0; i < n; ++i) {
    kvc_plugin_info info;
    kvc_status *status;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    status = kvc_context_plugin_info(context, i, &info);
    if (status != NULL) {
      kvc_status_free(status);
      continue;
    }
    if (info.kind == KVC_PLUGIN_POLICY && strcmp(info.name, name) == 0) return 1;
  }
  return 0;
}

static void format_ratio(char *out, size_t size, double ratio) {
  snprintf(out, size, "%g%%", 100.0 * ratio);
}


/* ------------------------------------------------------------------ statistics */

/* The mean of a - b over the scored tokens (b NULL: the mean of a) and its standard error.
 * Tokens of one window are correlated, so the windows are the independent units: the
 * cluster-robust variance sum_w (sum_{t in w} (d_t - mean))^2 / n^2, times N / (N - 1). */
static void paired_stats(const eval_state *st, const eval_result *a, const eval_result *b,
                         double *mean, double *se) {
  const int32_t k = a->per_window, nw = st->n_windows;
  const double n = (double)nw * k;
  double sum = 0.0, var = 0.0;
  int32_t w, t;
  for (w = 0; w < nw; ++w) {
    for (t = 0; t < k; ++t) {
      const size_t i = (size_t)w * k + t;
      sum += a->token_nll[i] - (b != NULL ? b->token_nll[i] : 0.0);
    }
  }
  *mean = sum / n;
  for (w = 0; w < nw; ++w) {
    double s_w = 0.0;
    for (t = 0; t < k; ++t) {
      const size_t i = (size_t)w * k + t;
      s_w += a->token_nll[i] - (b != NULL ? b->token_nll[i] : 0.0) - *mean;
    }
    var += s_w * s_w;
  }
  *se = nw > 1 ? sqrt(var / (n * n) * nw / (nw - 1)) : NAN;
}

/* |difference| > 1.96 standard errors: significant at about 5%, two-sided. */
static int significant(double diff, double se) { return se > 0.0 && fabs(diff) > 1.96 * se; }

/* ------------------------------------------------------------------ the report */

typedef struct eval_report {
  const eval_state *st;
  eval_result full_decode, full_prompt;
  const eval_row *rows; /* [n_policies * n_budgets], policy-major */
  int n_policies, n_budgets;
  const double *ratios;
} eval_report;

static const eval_row *row_at(const eval_report *r, int policy, int budget) {
  return &r->rows[policy * r->n_budgets + budget];
}

/* The two tables, as aligned text (markdown = 0) or Markdown (markdown = 1). */
static void print_tables(FILE *out, const eval_report *r, int markdown) {
  const eval_state *st = r->st;
  const char *sep = markdown ? " | " : "  ";
  char label[32], storage[128];
  int p, b;

  kvl_cli_storage_describe(&st->storage, storage, sizeof storage);
  fprintf(out, markdown ? "Storage: %s; windows from text token %d.\n\n"
                        : "storage: %s; windows from text token %d\n\n",
          storage, (int)st->skip);
  if (!st->skip_decode) {
    if (markdown) {
      fprintf(out,
              "**(a) Perplexity, decoding one token at a time** (%d window%s x %d scored tokens; "
              "budget = r x %d tokens per (layer, KV head), compressed after every step)\n\n",
              (int)st->n_windows, st->n_windows == 1 ? "" : "s", (int)(st->window - 1),
              (int)st->window);
      fprintf(out, "| policy");
      for (b = 0; b < r->n_budgets; ++b) {
        format_ratio(label, sizeof label, r->ratios[b]);
        fprintf(out, " | %s (%d)", label, (int)row_at(r, 0, b)->budget_decode);
      }
      fprintf(out, " |\n|---");
      for (b = 0; b < r->n_budgets; ++b) fprintf(out, "|---:");
      fprintf(out, "|\n| full cache");
    } else {
      fprintf(out,
              "(a) perplexity, decoding one token at a time: %d window%s x %d scored tokens,\n"
              "    budget = r x %d tokens per (layer, KV head), compressed after every step\n",
              (int)st->n_windows, st->n_windows == 1 ? "" : "s", (int)(st->window - 1),
              (int)st->window);
      fprintf(out, "%-12s", "policy");
      for (b = 0; b < r->n_budgets; ++b) {
        char head[64];
        format_ratio(label, sizeof label, r->ratios[b]);
        snprintf(head, sizeof head, "%s (%d)", label, (int)row_at(r, 0, b)->budget_decode);
        fprintf(out, "%s%14s", sep, head);
      }
      fprintf(out, "\n%-12s", "full cache");
    }
    for (b = 0; b < r->n_budgets; ++b) {
      fprintf(out, markdown ? "%s%.2f" : "%s%14.4f", sep, exp(r->full_decode.nll));
    }
    fprintf(out, markdown ? " |\n" : "\n");
    for (p = 0; p < r->n_policies; ++p) {
      fprintf(out, markdown ? "| %s" : "%-12s", row_at(r, p, 0)->policy);
      for (b = 0; b < r->n_budgets; ++b) {
        fprintf(out, markdown ? "%s%.2f" : "%s%14.4f", sep, exp(row_at(r, p, b)->decode.nll));
      }
      fprintf(out, markdown ? " |\n" : "\n");
    }
    fprintf(out, "\n");
  }
  if (st->skip_prefill) return;
  if (markdown) {
    fprintf(out,
            "**(b) Continuation NLL (nats)** of the last %d tokens of each window after a "
            "%d-token prompt prefilled in chunks of %d and compressed to r x %d tokens after "
            "every chunk (`per_chunk`) or once after prefill (`once`); no compression while "
            "decoding the continuation\n\n",
            EVAL_CONTINUATION, (int)st->prompt, (int)st->chunk, (int)st->prompt);
    fprintf(out, "| policy");
    for (b = 0; b < r->n_budgets; ++b) {
      format_ratio(label, sizeof label, r->ratios[b]);
      fprintf(out, " | %s (%d) per_chunk | %s once", label, (int)row_at(r, 0, b)->budget_prompt,
              label);
    }
    fprintf(out, " |\n|---");
    for (b = 0; b < r->n_budgets; ++b) fprintf(out, "|---:|---:");
    fprintf(out, "|\n| full cache");
  } else {
    fprintf(out,
            "(b) continuation NLL (nats) of the last %d tokens of each window after a %d-token\n"
            "    prompt prefilled in chunks of %d, compressed to r x %d tokens after every chunk\n"
            "    (per_chunk) or once after prefill (once); no compression while decoding it\n",
            EVAL_CONTINUATION, (int)st->prompt, (int)st->chunk, (int)st->prompt);
    fprintf(out, "%-12s", "policy");
    for (b = 0; b < r->n_budgets; ++b) {
      char head[64];
      format_ratio(label, sizeof label, r->ratios[b]);
      snprintf(head, sizeof head, "%s (%d)", label, (int)row_at(r, 0, b)->budget_prompt);
      fprintf(out, "%s%-19s", sep, head);
    }
    fprintf(out, "\n%-12s", "");
    for (b = 0; b < r->n_budgets; ++b) fprintf(out, "%s%9s %9s", sep, "per_chunk", "once");
    fprintf(out, "\n%-12s", "full cache");
  }
  for (b = 0; b < r->n_budgets; ++b) {
    if (markdown) {
      fprintf(out, " | %.4f | %.4f", r->full_prompt.nll, r->full_prompt.nll);
    } else {
      fprintf(out, "%s%9.4f %9.4f", sep, r->full_prompt.nll, r->full_prompt.nll);
    }
  }
  fprintf(out, markdown ? " |\n" : "\n");
  for (p = 0; p < r->n_policies; ++p) {
    fprintf(out, markdown ? "| %s" : "%-12s", row_at(r, p, 0)->policy);
    for (b = 0; b < r->n_budgets; ++b) {
      const eval_row *row = row_at(r, p, b);
      if (markdown) {
        fprintf(out, " | %.4f | %.4f", row->per_chunk.nll, row->once.nll);
      } else {
        fprintf(out, "%s%9.4f %9.4f", sep, row->per_chunk.nll, row->once.nll);
      }
    }
    fprintf(out, markdown ? " |\n" : "\n");
  }
}


static const eval_result *mode_result(const eval_row *row, int mode) {
  return mode == 0 ? &row->decode : mode == 1 ? &row->per_chunk : &row->once;
}

static const char *const mode_names[] = {"decode", "per_chunk", "once"};

/* Differences from the full cache, with standard errors: (a) in mean NLL, (b) in
 * continuation NLL. A '*' marks a difference larger than 1.96 standard errors. */
static void print_differences(FILE *out, const eval_report *r, int markdown) {
  const eval_state *st = r->st;
  char label[32];
  int p, b, mode;
  for (mode = st->skip_decode ? 1 : 0; mode < (st->skip_prefill ? 1 : 3); ++mode) {
    const eval_result *full = mode == 0 ? &r->full_decode : &r->full_prompt;
    if (mode == 2) continue; /* printed with per_chunk */
    if (markdown) {
      fprintf(out, "\n**%s: increase over the full cache (nats, +- standard error; * = beyond "
                   "1.96 SE)**\n\n| policy",
              mode == 0 ? "(a) mean NLL while decoding" : "(b) continuation NLL");
      for (b = 0; b < r->n_budgets; ++b) {
        format_ratio(label, sizeof label, r->ratios[b]);
        if (mode == 0) {
          fprintf(out, " | %s", label);
        } else {
          fprintf(out, " | %s per_chunk | %s once", label, label);
        }
      }
      fprintf(out, " |\n|---");
      for (b = 0; b < r->n_budgets; ++b) fprintf(out, mode == 0 ? "|---:" : "|---:|---:");
      fprintf(out, "|\n");
    } else {
      fprintf(out, "\n%s: increase over the full cache in nats, +- standard error (windows as\n"
                   "    clusters); * = beyond 1.96 standard errors\n%-12s",
              mode == 0 ? "(a) mean NLL while decoding" : "(b) continuation NLL", "policy");
      for (b = 0; b < r->n_budgets; ++b) {
        format_ratio(label, sizeof label, r->ratios[b]);
        if (mode == 0) {
          fprintf(out, "  %-17s", label);
        } else {
          char head[64];
          snprintf(head, sizeof head, "%s per_chunk", label);
          fprintf(out, "  %-17s  %-17s", head, "once");
        }
      }
      fprintf(out, "\n");
    }
    for (p = 0; p < r->n_policies; ++p) {
      fprintf(out, markdown ? "| %s" : "%-12s", row_at(r, p, 0)->policy);
      for (b = 0; b < r->n_budgets; ++b) {
        int m;
        for (m = mode; m <= (mode == 0 ? 0 : 2); ++m) {
          double d, se;
          char cell[64];
          paired_stats(st, mode_result(row_at(r, p, b), m), full, &d, &se);
          snprintf(cell, sizeof cell, "%+.4f +- %.4f%s", d, se, significant(d, se) ? "*" : "");
          fprintf(out, markdown ? " | %s" : "  %-17s", cell);
        }
      }
      fprintf(out, markdown ? " |\n" : "\n");
    }
  }
}

static int find_policy(const eval_report *r, const char *name) {
  int p;
  for (p = 0; p < r->n_policies; ++p) {
    if (strcmp(row_at(r, p, 0)->policy, name) == 0) return p;
  }
  return -1;
}

/* For each budget and prefill mode: the best policy against StreamingLLM, and random against
 * the others. As text lines (values = 0) or name=value lines (values = 1). */
static void print_summary(FILE *out, const eval_report *r, int values) {
  const eval_state *st = r->st;
  const int streaming = find_policy(r, "streaming"), random_ = find_policy(r, "random");
  int b, mode;
  if (st->skip_prefill) return;
  if (!values) fprintf(out, "\nsummary (continuation NLL increase over the full cache):\n");
  for (b = 0; b < r->n_budgets; ++b) {
    for (mode = 1; mode < 3; ++mode) {
      int p, best = -1, worst_other = -1, rank = 1;
      double best_d, best_se, s_d = NAN, s_se = NAN, bs_d = NAN, bs_se = NAN;
      char label[32], key[96];
      for (p = 0; p < r->n_policies; ++p) {
        const double v = mode_result(row_at(r, p, b), mode)->nll;
        if (strcmp(row_at(r, p, 0)->policy, "full") == 0) continue;
        if (best < 0 || v < mode_result(row_at(r, best, b), mode)->nll) best = p;
        if (p != random_ && (worst_other < 0 ||
                             v > mode_result(row_at(r, worst_other, b), mode)->nll)) {
          worst_other = p;
        }
      }
      if (best < 0) continue;
      format_ratio(label, sizeof label, r->ratios[b]);
      snprintf(key, sizeof key, "summary.r%g.%s", r->ratios[b], mode_names[mode]);
      paired_stats(st, mode_result(row_at(r, best, b), mode), &r->full_prompt, &best_d, &best_se);
      if (streaming >= 0) {
        paired_stats(st, mode_result(row_at(r, streaming, b), mode), &r->full_prompt, &s_d, &s_se);
        paired_stats(st, mode_result(row_at(r, best, b), mode),
                     mode_result(row_at(r, streaming, b), mode), &bs_d, &bs_se);
      }
      if (values) {
        fprintf(out, "%s.best=%s\n%s.best_delta=%.6f\n%s.best_delta_se=%.6f\n", key,
                row_at(r, best, 0)->policy, key, best_d, key, best_se);
        if (streaming >= 0) {
          fprintf(out,
                  "%s.streaming_delta=%.6f\n%s.streaming_delta_se=%.6f\n"
                  "%s.best_minus_streaming=%.6f\n%s.best_minus_streaming_se=%.6f\n",
                  key, s_d, key, s_se, key, bs_d, key, bs_se);
        }
      } else {
        fprintf(out, "  %s %s: best %s %+.4f +- %.4f", label, mode_names[mode],
                row_at(r, best, 0)->policy, best_d, best_se);
        if (streaming >= 0) {
          fprintf(out, "; streaming %+.4f +- %.4f; best - streaming %+.4f +- %.4f (%s)", s_d,
                  s_se, bs_d, bs_se, significant(bs_d, bs_se) ? "significant" : "not significant");
        }
        fprintf(out, "\n");
      }
      if (random_ >= 0 && worst_other >= 0) {
        double rd, rse, ro, rose;
        const double rv = mode_result(row_at(r, random_, b), mode)->nll;
        for (p = 0; p < r->n_policies; ++p) {
          if (p != random_ && mode_result(row_at(r, p, b), mode)->nll > rv) ++rank;
        }
        paired_stats(st, mode_result(row_at(r, random_, b), mode), &r->full_prompt, &rd, &rse);
        paired_stats(st, mode_result(row_at(r, random_, b), mode),
                     mode_result(row_at(r, worst_other, b), mode), &ro, &rose);
        if (values) {
          fprintf(out,
                  "%s.random_delta=%.6f\n%s.random_rank_from_worst=%d\n"
                  "%s.random_minus_next_worst=%.6f\n%s.random_minus_next_worst_se=%.6f\n",
                  key, rd, key, rank, key, ro, key, rose);
        } else {
          fprintf(out,
                  "      random %+.4f +- %.4f, rank %d from the worst; random - %s (the worst "
                  "other) %+.4f +- %.4f (%s)\n",
                  rd, rse, rank, row_at(r, worst_other, 0)->policy, ro, rose,
                  significant(ro, rose) ? "significant" : "not significant");
        }
      }
    }
  }
}

static void print_storage_values(FILE *out, const kvl_cli_storage *storage) {
  fprintf(out, "dtype=%s\nfull_dtype=%s\n", kvc_format_name(storage->dtype),
          kvc_format_name(storage->full_dtype));
  if (storage->demote < 0) {
    fprintf(out, "demote=none\n");
  } else {
    fprintf(out, "demote=%s\ndemote_keep=%g\n", kvc_format_name(storage->demote),
            kvl_cli_storage_keep(storage));
  }
}

static void print_values(FILE *out, const eval_report *r) {
  int p, b;
  fprintf(out, "windows=%d\nwindow_positions=%d\nscored_tokens=%d\n", (int)r->st->n_windows,
          (int)r->st->window,
          r->st->skip_decode ? 0 : (int)(r->st->n_windows * (r->st->window - 1)));
  fprintf(out, "prompt_tokens=%d\ncontinuation_tokens=%d\nchunk=%d\nskip=%d\n",
          (int)r->st->prompt, EVAL_CONTINUATION, (int)r->st->chunk, (int)r->st->skip);
  print_storage_values(out, &r->st->storage);
  fprintf(out, "full_cache.ppl=%.4f\nfull_cache.nll=%.6f\nfull_cache.cont_nll=%.6f\n",
          exp(r->full_decode.nll), r->full_decode.nll, r->full_prompt.nll);
  for (p = 0; p < r->n_policies; ++p) {
    for (b = 0; b < r->n_budgets; ++b) {
      const eval_row *row = row_at(r, p, b);
      fprintf(out, "%s.r%g.ppl=%.4f\n", row->policy, row->ratio, exp(row->decode.nll));
      fprintf(out, "%s.r%g.nll=%.6f\n", row->policy, row->ratio, row->decode.nll);
      fprintf(out, "%s.r%g.cont_nll.per_chunk=%.6f\n", row->policy, row->ratio,
              row->per_chunk.nll);
      fprintf(out, "%s.r%g.cont_nll.once=%.6f\n", row->policy, row->ratio, row->once.nll);
    }
  }
}

static int write_csv(const char *path, const eval_report *r) {
  const kvl_cli_storage *storage = &r->st->storage;
  const char *demote = storage->demote < 0 ? "none" : kvc_format_name(storage->demote);
  double demote_keep = -1.0;
  FILE *f = fopen(path, "w");
  int p, b;
  if (storage->demote >= 0) demote_keep = kvl_cli_storage_keep(storage);
  if (f == NULL) {
    kvl_cli_error("%s: cannot open for writing", path);
    return -1;
  }
  fprintf(f,
          "policy,budget_ratio,decode_budget,sinks,recent,ppl,nll,held_decode,prompt_budget,"
          "prompt_sinks,prompt_recent,cont_nll_per_chunk,cont_nll_once,held_per_chunk,"
          "held_once,held_bytes_decode,held_bytes_per_chunk,held_bytes_once,dtype,demote,"
          "demote_keep\n");
  /* The full cache: no policy, no budget (0), no protected tokens (-1 = not applicable). The
   * sinks and recent columns of a policy are the tokens the host protects: the policy's
   * default as kvc_cache_policy_info reports it, unless eval set them; h2o's recent half is
   * part of its score, not protected by the host. held_*: tokens held at the end, mean over
   * (window, layer, KV head); held_bytes_*: the cache's bytes_used at the end, likewise. dtype
   * is the row's (the full cache's is --full-dtype); demote and demote_keep are the policies'
   * (none and -1 when there is none, and for the full cache). */
  fprintf(f, "full_cache,1,0,-1,-1,%.6f,%.6f,%.2f,0,-1,-1,%.6f,%.6f,%.2f,%.2f,%.0f,%.0f,%.0f,%s,"
             "none,-1\n",
          exp(r->full_decode.nll), r->full_decode.nll, r->full_decode.held, r->full_prompt.nll,
          r->full_prompt.nll, r->full_prompt.held, r->full_prompt.held,
          r->full_decode.held_bytes, r->full_prompt.held_bytes, r->full_prompt.held_bytes,
          kvc_format_name(storage->full_dtype));
  for (p = 0; p < r->n_policies; ++p) {
    for (b = 0; b < r->n_budgets; ++b) {
      const eval_row *row = row_at(r, p, b);
      fprintf(f,
              "%s,%g,%d,%d,%d,%.6f,%.6f,%.2f,%d,%d,%d,%.6f,%.6f,%.2f,%.2f,%.0f,%.0f,%.0f,%s,%s,"
              "%g\n",
              row->policy, row->ratio, (int)row->budget_decode, (int)row->sinks_decode,
              (int)row->recent_decode, exp(row->decode.nll), row->decode.nll, row->decode.held,
              (int)row->budget_prompt, (int)row->sinks_prompt, (int)row->recent_prompt,
              row->per_chunk.nll, row->once.nll, row->per_chunk.held, row->once.held,
              row->decode.held_bytes, row->per_chunk.held_bytes, row->once.held_bytes,
              kvc_format_name(storage->dtype), demote, demote_keep);
    }
  }
  if (fclose(f) != 0) {
    kvl_cli_error("%s: write error", path);
    return -1;
  }
  return 0;
}

static int write_markdown(const char *path, const eval_report *r) {
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    kvl_cli_error("%s: cannot open for writing", path);
    return -1;
  }
  print_tables(f, r, 1);
  print_differences(f, r, 1);
  if (fclose(f) != 0) {
    kvl_cli_error("%s: write error", path);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ the command */

int kvl_cmd_eval(int argc, char **argv) {
  const char *model_path = NULL, *tokenizer_path = NULL, *text_path = NULL;
  const char *windows_text = NULL, *policies_text = NULL, *budgets_text = NULL;
  const char *chunk_text = NULL, *csv_path = NULL, *markdown_path = NULL, *ids_path = NULL;
  const char *prompt_text = NULL, *skip_text = NULL;
  kvl_cli_storage_text storage_text = {NULL, NULL, NULL, NULL};
  int skip_decode = 0, skip_prefill = 0;
  const kvl_cli_option options[] = {
      {"--model", &model_path, NULL},       {"--tokenizer", &tokenizer_path, NULL},
      {"--text", &text_path, NULL},         {"--token-ids", &ids_path, NULL},
      {"--windows", &windows_text, NULL},   {"--prompt", &prompt_text, NULL},
      {"--policies", &policies_text, NULL}, {"--budgets", &budgets_text, NULL},
      {"--chunk", &chunk_text, NULL},       {"--csv", &csv_path, NULL},
      {"--markdown", &markdown_path, NULL}, {"--skip-decode", NULL, &skip_decode},
      {"--skip-prefill", NULL, &skip_prefill}, {"--skip", &skip_text, NULL},
      KVL_CLI_STORAGE_OPTIONS(storage_text),
  };
  char *policy_list = NULL, *budget_list = NULL, *text = NULL;
  char *policy_items[EVAL_MAX_POLICIES], *budget_items[EVAL_MAX_BUDGETS];
  const char *policies[EVAL_MAX_POLICIES];
  double ratios[EVAL_MAX_BUDGETS];
  int n_policies = 0, n_budgets = 0, p, b, done_runs = 0, total_runs;
  int32_t n_windows = 4, chunk = 64, n_text = 0, prompt = 0, i, bos;
  int32_t *text_tokens = NULL;
  eval_row *rows = NULL;
  eval_state st;
  eval_report report;
  eval_setup setup;
  size_t text_size = 0;
  double t_start, t_run;
  char error[1024];
  int rc;

  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--retrieval") == 0) return kvl_eval_retrieval(argc, argv);
  }
  memset(&st, 0, sizeof st);
  memset(&report, 0, sizeof report);
  rc = kvl_cli_parse(argc, argv, usage, options, sizeof options / sizeof options[0]);
  if (rc != KVL_EXIT_OK) return rc < 0 ? KVL_EXIT_OK : rc;
  if (model_path == NULL) return kvl_cli_usage_error(argv[0], usage, "--model is required");
  if ((text_path == NULL) == (ids_path == NULL)) {
    return kvl_cli_usage_error(argv[0], usage, "give exactly one of --text and --token-ids");
  }
  if ((rc = kvl_cli_int(argv[0], usage, "--windows", windows_text, 1, 4096, &n_windows)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--prompt", prompt_text, 2, 1L << 20, &prompt)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--chunk", chunk_text, 2, 1L << 20, &chunk)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--skip", skip_text, 0, 2147483647L, &st.skip)) != 0 ||
      (rc = kvl_cli_storage_parse(argv[0], usage, &storage_text, &st.storage)) != 0) {
    return rc;
  }

  /* Policies and budgets. */
  if (policies_text != NULL) {
    policy_list = (char *)malloc(strlen(policies_text) + 1);
    if (policy_list == NULL) {
      kvl_cli_error("out of host memory");
      return KVL_EXIT_FAILURE;
    }
    strcpy(policy_list, policies_text);
    n_policies = split_list(policy_list, policy_items, EVAL_MAX_POLICIES);
    if (n_policies < 0) {
      free(policy_list);
      return kvl_cli_usage_error(argv[0], usage,
                                 "--policies expects up to %d comma-separated names, got '%s'",
                                 EVAL_MAX_POLICIES, policies_text);
    }
    for (p = 0; p < n_policies; ++p) policies[p] = policy_items[p];
  } else {
    n_policies = (int)(sizeof default_policies / sizeof default_policies[0]);
    for (p = 0; p < n_policies; ++p) policies[p] = default_policies[p];
  }
  budget_list = (char *)malloc(strlen(budgets_text ? budgets_text : "0.125,0.25,0.5") + 1);
  if (budget_list == NULL) {
    free(policy_list);
    kvl_cli_error("out of host memory");
    return KVL_EXIT_FAILURE;
  }
  strcpy(budget_list, budgets_text ? budgets_text : "0.125,0.25,0.5");
  n_budgets = split_list(budget_list, budget_items, EVAL_MAX_BUDGETS);
  for (b = 0; b < n_budgets; ++b) {
    char *end;
    ratios[b] = strtod(budget_items[b], &end);
    if (end == budget_items[b] || *end != '\0' || !(ratios[b] > 0.0 && ratios[b] <= 1.0)) break;
  }
  if (n_budgets < 0 || b < n_budgets) {
    rc = kvl_cli_usage_error(argv[0], usage,
                             "--budgets expects up to %d comma-separated ratios in (0, 1], got "
                             "'%s'",
                             EVAL_MAX_BUDGETS, budgets_text ? budgets_text : "");
    free(budget_list);
    free(policy_list);
    return rc;
  }

  /* Model, tokenizer, context, text. */
  if (text_path != NULL) {
    text = kvl_cli_read_text(text_path, &text_size);
    tokenizer_path = kvl_cli_tokenizer_path(model_path, tokenizer_path);
    if (text == NULL || tokenizer_path == NULL) {
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
  }
  if (kvl_model_load(model_path, &st.model, error, sizeof error) != 0 ||
      (tokenizer_path != NULL &&
       kvl_tokenizer_load(tokenizer_path, kvl_model_config(st.model)->vocab_size, &st.tokenizer,
                          error, sizeof error) != 0)) {
    kvl_cli_error("%s", error);
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  {
    kvc_status *status = kvc_context_create(NULL, &st.context);
    if (status != NULL) {
      fail_status(status, "kvc_context_create");
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
  }
  for (p = 0; p < n_policies; ++p) {
    if (!policy_loaded(st.context, policies[p])) {
      kvl_cli_error("no policy plugin named '%s' is loaded", policies[p]);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
  }
  for (p = 0; p < n_policies; ++p) {
    if (kvl_cli_storage_check(st.context, st.model, &st.storage, policies[p]) != 0) {
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
  }
  st.vocab = kvl_model_config(st.model)->vocab_size;
  bos = kvl_model_bos(st.model);
  {
    const int32_t context = kvl_model_config(st.model)->seq_len;
    st.prompt = prompt > 0 ? prompt : (context < 512 ? context : 512) - EVAL_CONTINUATION;
    st.window = st.prompt + EVAL_CONTINUATION;
    if (st.prompt < 2) {
      kvl_cli_error("the model's context %d leaves no prompt before a %d-token continuation",
                    (int)context, EVAL_CONTINUATION);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
    if (st.window > context) {
      fprintf(stderr, "kvc-llama eval: note: windows of %d positions exceed the model's context %d\n",
              (int)st.window, (int)context);
    }
  }
  st.n_windows = n_windows;
  st.chunk = chunk;
  st.skip_decode = skip_decode;
  st.skip_prefill = skip_prefill;
  if (skip_decode && skip_prefill) {
    rc = kvl_cli_usage_error(argv[0], usage, "--skip-decode and --skip-prefill leave nothing");
    goto done;
  }
  text_tokens =
      kvl_cli_text_tokens(st.tokenizer, text, text_size, text_path, ids_path, st.vocab, &n_text);
  if (text_tokens == NULL) {
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  st.windows = (int32_t *)malloc((size_t)n_windows * st.window * sizeof(int32_t));
  st.tokens = (int32_t *)malloc((size_t)n_windows * (chunk + 1) * sizeof(int32_t));
  st.positions = (int32_t *)malloc((size_t)n_windows * (chunk + 1) * sizeof(int32_t));
  st.n_tokens = (int32_t *)malloc((size_t)n_windows * sizeof(int32_t));
  st.seq_ids = (int32_t *)malloc((size_t)n_windows * sizeof(int32_t));
  st.logits = (float *)malloc((size_t)n_windows * st.vocab * sizeof(float));
  rows = (eval_row *)calloc((size_t)n_policies * n_budgets, sizeof(eval_row));
  if (st.windows == NULL || st.tokens == NULL || st.positions == NULL ||
      st.n_tokens == NULL || st.seq_ids == NULL || st.logits == NULL || rows == NULL) {
    kvl_cli_error("out of host memory");
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  {
    /* With BOS a window holds W - 1 text tokens, without W. */
    const int32_t per = bos >= 0 ? st.window - 1 : st.window;
    const int64_t need = (int64_t)st.skip + (int64_t)n_windows * per;
    if ((int64_t)n_text < need) {
      kvl_cli_error("%s has %d tokens; --skip %d and %d window%s of %d text tokens need %lld",
                    text_path ? text_path : ids_path, (int)n_text, (int)st.skip, (int)n_windows,
                    n_windows == 1 ? "" : "s", (int)per, (long long)need);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
    for (i = 0; i < n_windows; ++i) {
      int32_t *w = st.windows + (size_t)i * st.window;
      const int32_t *x = text_tokens + st.skip + (size_t)i * per;
      int32_t j;
      st.seq_ids[i] = i;
      if (bos >= 0) {
        w[0] = bos;
        for (j = 1; j < st.window; ++j) w[j] = x[j - 1];
      } else {
        for (j = 0; j < st.window; ++j) w[j] = x[j];
      }
    }
  }

  {
    char storage[128];
    kvl_cli_storage_describe(&st.storage, storage, sizeof storage);
    fprintf(stderr,
            "kvc-llama eval: %d polic%s x %d budget%s, %d window%s of %d positions from text "
            "token %d, prompt %d + continuation %d, chunks of %d; %s\n",
            n_policies, n_policies == 1 ? "y" : "ies", n_budgets, n_budgets == 1 ? "" : "s",
            (int)n_windows, n_windows == 1 ? "" : "s", (int)st.window, (int)st.skip,
            (int)st.prompt, EVAL_CONTINUATION, (int)chunk, storage);
  }
  t_start = kvl_cli_now();
  total_runs = 1 + n_policies * n_budgets;

  /* The full cache: no policy. Per_chunk and once are the same procedure without one. */
  memset(&setup, 0, sizeof setup);
  report.full_decode.nll = report.full_prompt.nll = NAN;
  t_run = kvl_cli_now();
  if ((!st.skip_decode && run_decode(&st, &setup, &report.full_decode) != 0) ||
      (!st.skip_prefill && run_prefill(&st, &setup, &report.full_prompt) != 0)) {
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  fprintf(stderr, "[%d/%d] full cache: ppl %.4f, continuation NLL %.4f (%.2f s)\n", ++done_runs,
          total_runs, exp(report.full_decode.nll), report.full_prompt.nll,
          kvl_cli_now() - t_run);

  for (p = 0; p < n_policies; ++p) {
    for (b = 0; b < n_budgets; ++b) {
      eval_row *row = &rows[p * n_budgets + b];
      long rounded;
      char label[32];
      row->decode.nll = row->per_chunk.nll = row->once.nll = NAN;
      row->policy = policies[p];
      row->ratio = ratios[b];
      rounded = lround(ratios[b] * st.window);
      row->budget_decode = rounded < 1 ? 1 : (int32_t)rounded;
      rounded = lround(ratios[b] * st.prompt);
      row->budget_prompt = rounded < 1 ? 1 : (int32_t)rounded;
      if (protected_for(&st, row->policy, row->budget_decode, "decode", &row->sinks_decode,
                        &row->recent_decode, &row->explicit_decode) != 0 ||
          protected_for(&st, row->policy, row->budget_prompt, "prompt", &row->sinks_prompt,
                        &row->recent_prompt, &row->explicit_prompt) != 0) {
        rc = KVL_EXIT_FAILURE;
        goto done;
      }
      t_run = kvl_cli_now();

      setup.policy = row->policy;
      setup.budget = row->budget_decode;
      setup.sinks = row->explicit_decode ? row->sinks_decode : -1;
      setup.recent = row->explicit_decode ? row->recent_decode : -1;
      setup.prefill = KVC_PREFILL_NONE;
      setup.decode_every = 1;
      if (!st.skip_decode && run_decode(&st, &setup, &row->decode) != 0) {
        rc = KVL_EXIT_FAILURE;
        goto done;
      }
      setup.budget = row->budget_prompt;
      setup.sinks = row->explicit_prompt ? row->sinks_prompt : -1;
      setup.recent = row->explicit_prompt ? row->recent_prompt : -1;
      setup.decode_every = 0;
      setup.prefill = KVC_PREFILL_PER_CHUNK;
      if (!st.skip_prefill && run_prefill(&st, &setup, &row->per_chunk) != 0) {
        rc = KVL_EXIT_FAILURE;
        goto done;
      }
      setup.prefill = KVC_PREFILL_ONCE;
      if (!st.skip_prefill && run_prefill(&st, &setup, &row->once) != 0) {
        rc = KVL_EXIT_FAILURE;
        goto done;
      }
      format_ratio(label, sizeof label, row->ratio);
      fprintf(stderr,
              "[%d/%d] %s %s: ppl %.4f (budget %d, %.1f held); continuation NLL per_chunk "
              "%.4f, once %.4f (budget %d, per_chunk %.1f held in %.0f bytes) (%.2f s)\n",
              ++done_runs, total_runs, row->policy, label, exp(row->decode.nll),
              (int)row->budget_decode, row->decode.held, row->per_chunk.nll, row->once.nll,
              (int)row->budget_prompt, row->per_chunk.held, row->per_chunk.held_bytes,
              kvl_cli_now() - t_run);
    }
  }

  report.st = &st;
  report.rows = rows;
  report.n_policies = n_policies;
  report.n_budgets = n_budgets;
  report.ratios = ratios;
  print_tables(stdout, &report, 0);
  print_differences(stdout, &report, 0);
  print_summary(stdout, &report, 0);
  printf("\n");
  print_values(stdout, &report);
  print_summary(stdout, &report, 1);
  printf("seconds=%.2f\n", kvl_cli_now() - t_start);
  fprintf(stderr, "kvc-llama eval: %d runs in %.2f s\n", total_runs, kvl_cli_now() - t_start);
  rc = KVL_EXIT_OK;
  if (csv_path != NULL && write_csv(csv_path, &report) != 0) rc = KVL_EXIT_FAILURE;
  if (markdown_path != NULL && write_markdown(markdown_path, &report) != 0) {
    rc = KVL_EXIT_FAILURE;
  }

done:
  if (rows != NULL) {
    for (i = 0; i < n_policies * n_budgets; ++i) {
      free(rows[i].decode.token_nll);
      free(rows[i].per_chunk.token_nll);
      free(rows[i].once.token_nll);
    }
  }
  free(report.full_decode.token_nll);
  free(report.full_prompt.token_nll);
  free(rows);
  free(st.logits);
  free(st.seq_ids);
  free(st.n_tokens);
  free(st.positions);
  free(st.tokens);
  free(st.windows);
  free(text_tokens);
  kvc_context_destroy(st.context);
  kvl_tokenizer_free(st.tokenizer);
  kvl_model_free(st.model);
  free(text);
  free(budget_list);
  free(policy_list);
  return rc;
}
