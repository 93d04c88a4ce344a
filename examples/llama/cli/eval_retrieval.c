/*
 * kvc-llama eval --retrieval: pass-key retrieval from long prompts under each eviction
 * policy. A five-digit pass key is hidden at a given depth of repetitive filler text; the
 * prompt asks for it at the end through the model's chat template (ChatML, as SmolLM2's
 * tokenizer.chat_template), and the model's greedy answer is right when its first number is
 * the key. Prompts of one length run as one batch; the cache compresses the prompt to the
 * budget (once, when the answer's first token arrives, or after every prefill chunk).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define RET_MAX_ITEMS 16
#define RET_MAX_POLICIES 64
#define RET_ANSWER_TOKENS 8

static const char usage[] =
    "usage: kvc-llama eval --retrieval --model FILE [--tokenizer FILE] [--lengths L1,...]\n"
    "                      [--depths d1,...] [--keys N] [--policies a,...] [--budgets r1,...]\n"
    "                      [--prefill once|per_chunk] [--chunk N] [--seed N]\n"
    "                      [--dtype F] [--full-dtype F] [--demote F [--demote-keep R]]\n"
    "\n"
    "Pass-key retrieval. Each prompt is the chat template around\n"
    "  \"There is an important pass key hidden inside a lot of irrelevant text. Find it\n"
    "   and memorize it.\" + filler + \"The pass key is K. Remember it. K is the pass key.\"\n"
    "   + filler + \"What is the pass key?\"\n"
    "with the assistant's turn begun as \"The pass key is\"; the filler repeats \"The grass is\n"
    "green. The sky is blue. The sun is yellow. Here we go. There and back again.\", a depth d\n"
    "of it before the key. The answer is right when the first number of the greedy\n"
    "continuation (8 tokens) is K; \"digits\" counts the key's digits it has in place.\n"
    "Budget r keeps round(r * prompt tokens) tokens per (layer, KV head); the full cache\n"
    "keeps everything, in --dtype unless --full-dtype is given.\n"
    "\n"
    "  --model FILE       GGUF model with a byte-level BPE vocabulary and ChatML tokens\n"
    "  --tokenizer FILE   default: the model's vocabulary\n"
    "  --lengths LIST     prompt lengths in tokens (default 1024,2048,4096)\n"
    "  --depths LIST      where the key lies, as a share of the filler (default 0.1,0.5,0.9)\n"
    "  --keys N           keys per (length, depth) (default 2)\n"
    "  --policies LIST    policies to compare with the full cache (default: window,streaming,\n"
    "                     h2o,tova,snapkv,pyramidkv,adakv,knorm,keydiff,random)\n"
    "  --budgets LIST     budget ratios (default 0.125,0.25)\n"
    "  --prefill MODE     once (default) or per_chunk\n"
    "  --chunk N          prefill chunk (default 256)\n"
    "  --seed N           the keys' seed (default 1)\n" KVL_CLI_STORAGE_USAGE;

static const char *const default_policies[] = {"window",    "streaming", "h2o",   "tova",
                                               "snapkv",    "pyramidkv", "adakv", "knorm",
                                               "keydiff",   "random"};

typedef struct ret_prompt {
  int32_t *tokens;
  int32_t n;
  int32_t key;
  int depth_index, length_index;
} ret_prompt;

typedef struct ret_state {
  kvl_model *model;
  kvl_tokenizer *tokenizer;
  kvc_context *context;
  int32_t vocab, chunk;
  kvc_prefill_compression prefill;
  kvl_cli_storage storage;
} ret_state;

static int split_numbers(const char *text, double *out, int max) {
  int n = 0;
  const char *at = text;
  while (*at != '\0') {
    char *end;
    double v = strtod(at, &end);
    if (end == at || n == max || !(v > 0.0)) return -1;
    out[n++] = v;
    at = end;
    if (*at == ',') {
      ++at;
    } else if (*at != '\0') {
      return -1;
    }
  }
  return n;
}

static int32_t *encode(const kvl_tokenizer *t, const char *text, int32_t *n) {
  const int32_t room = (int32_t)strlen(text) + 4;
  int32_t *tokens = (int32_t *)malloc((size_t)room * sizeof(int32_t));
  if (tokens == NULL) return NULL;
  *n = kvl_tokenizer_encode(t, text, 0, 0, tokens, room);
  if (*n < 0) {
    free(tokens);
    return NULL;
  }
  return tokens;
}

/* The prompt of `length` tokens (about: the filler comes in whole sentences) with `key`
 * at `depth`. */
static int build_prompt(const kvl_tokenizer *t, int32_t length, double depth, int32_t key,
                        ret_prompt *out) {
  static const char head[] =
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n<|im_start|>user\nThere is an important pass key hidden inside a lot of "
      "irrelevant text. Find it and memorize it.\n\n";
  static const char filler[] =
      " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back "
      "again.";
  static const char tail[] =
      "\n\nWhat is the pass key?<|im_end|>\n<|im_start|>assistant\nThe pass key is";
  char needle[128];
  int32_t n_head = 0, n_filler = 0, n_needle = 0, n_tail = 0, reps, before, i, at = 0;
  int32_t *h = encode(t, head, &n_head), *f = encode(t, filler, &n_filler);
  int32_t *nd, *tl = encode(t, tail, &n_tail);
  snprintf(needle, sizeof needle, " The pass key is %05d. Remember it. %05d is the pass key.",
           (int)key, (int)key);
  nd = encode(t, needle, &n_needle);
  if (h == NULL || f == NULL || nd == NULL || tl == NULL) {
    free(h), free(f), free(nd), free(tl);
    kvl_cli_error("the tokenizer cannot encode the retrieval prompt");
    return -1;
  }
  reps = (length - n_head - n_needle - n_tail) / n_filler;
  if (reps < 1) reps = 1;
  before = (int32_t)lround(depth * reps);
  out->n = n_head + reps * n_filler + n_needle + n_tail;
  out->tokens = (int32_t *)malloc((size_t)out->n * sizeof(int32_t));
  out->key = key;
  if (out->tokens == NULL) {
    free(h), free(f), free(nd), free(tl);
    kvl_cli_error("out of host memory");
    return -1;
  }
  memcpy(out->tokens, h, (size_t)n_head * sizeof(int32_t));
  at = n_head;
  for (i = 0; i < reps; ++i) {
    if (i == before) {
      memcpy(out->tokens + at, nd, (size_t)n_needle * sizeof(int32_t));
      at += n_needle;
    }
    memcpy(out->tokens + at, f, (size_t)n_filler * sizeof(int32_t));
    at += n_filler;
  }
  if (before >= reps) {
    memcpy(out->tokens + at, nd, (size_t)n_needle * sizeof(int32_t));
    at += n_needle;
  }
  memcpy(out->tokens + at, tl, (size_t)n_tail * sizeof(int32_t));
  free(h), free(f), free(nd), free(tl);
  return 0;
}

/* How many of the key's five digits the first number of the answer gets right, in place. */
static int digits_right(const char *text, int32_t key) {
  char want[16];
  int n = 0, i;
  while (*text != '\0' && !isdigit((unsigned char)*text)) ++text;
  snprintf(want, sizeof want, "%05d", (int)key);
  for (i = 0; i < 5 && isdigit((unsigned char)text[i]); ++i) n += text[i] == want[i];
  return n;
}

/* The first number in the decoded answer, or -1. */
static int32_t first_number(const char *text) {
  while (*text != '\0' && !isdigit((unsigned char)*text)) ++text;
  if (*text == '\0') return -1;
  return (int32_t)strtol(text, NULL, 10);
}

/* Runs the prompts [first, first + n) (all of one length) with one cache configuration;
 * adds the right answers per prompt into correct[]. */
static int run_batch(ret_state *st, const char *policy, int32_t budget, ret_prompt *prompts,
                     int32_t n, int *correct, int *digits, int verbose) {
  kvc_cache_params p;
  kvc_cache *cache = NULL;
  kvl_engine *engine = NULL;
  kvc_status *status;
  char error[1024];
  int32_t *seq_ids = NULL, *n_tokens = NULL, *tokens = NULL, *positions = NULL, *answer = NULL;
  int32_t *fed = NULL;
  float *logits = NULL;
  int32_t i, step, left = n;
  int rc = -1;

  kvl_cache_params_for(st->model, &p);
  kvl_cli_storage_apply(&st->storage, policy != NULL, &p);
  p.memory_limit = (size_t)8 << 30;
  if (policy != NULL) {
    p.policy = policy;
    p.budget = budget;
    p.prefill = st->prefill;
    p.decode_every = 0;
  }
  status = kvc_cache_create(st->context, &p, &cache);
  if (status != NULL) {
    kvl_cli_error("kvc_cache_create: %s", kvc_status_message(status));
    kvc_status_free(status);
    return -1;
  }
  seq_ids = (int32_t *)malloc((size_t)n * sizeof(int32_t));
  n_tokens = (int32_t *)malloc((size_t)n * sizeof(int32_t));
  tokens = (int32_t *)malloc((size_t)n * (st->chunk + 1) * sizeof(int32_t));
  positions = (int32_t *)malloc((size_t)n * (st->chunk + 1) * sizeof(int32_t));
  answer = (int32_t *)calloc((size_t)n * RET_ANSWER_TOKENS, sizeof(int32_t));
  logits = (float *)malloc((size_t)n * st->vocab * sizeof(float));
  fed = (int32_t *)calloc((size_t)n, sizeof(int32_t));
  if (!seq_ids || !n_tokens || !tokens || !positions || !answer || !logits || !fed) {
    kvl_cli_error("out of host memory");
    goto done;
  }
  if (kvl_engine_create(st->model, cache, n * (st->chunk + 1), &engine, error, sizeof error) !=
      0) {
    kvl_cli_error("%s", error);
    goto done;
  }
  for (i = 0; i < n; ++i) {
    seq_ids[i] = i;
    status = kvc_seq_create(cache, i);
    if (status != NULL) {
      kvl_cli_error("kvc_seq_create: %s", kvc_status_message(status));
      kvc_status_free(status);
      goto done;
    }
  }
  /* Prefill: prompts of different lengths finish at different steps; each step takes the
   * next chunk of every prompt not yet done (its last chunk never a single token). */
  while (left > 0) {
    int32_t n_seqs = 0, total = 0, s;
    for (s = 0; s < n; ++s) {
      const int32_t at = fed[s];
      int32_t m = prompts[s].n - at, j;
      if (m <= 0) continue;
      if (m > st->chunk) m = st->chunk;
      if (prompts[s].n - at - m == 1) ++m;
      for (j = 0; j < m; ++j) {
        tokens[total + j] = prompts[s].tokens[at + j];
        positions[total + j] = at + j;
      }
      seq_ids[n_seqs] = s;
      n_tokens[n_seqs++] = m;
      total += m;
    }
    if (kvl_engine_forward(engine, n_seqs, seq_ids, n_tokens, tokens, positions, 0, logits, error,
                           sizeof error) != 0) {
      kvl_cli_error("%s", error);
      goto done;
    }
    /* A prompt whose last chunk this was: its logits give the answer's first token. */
    for (s = 0; s < n_seqs; ++s) {
      const int32_t q = seq_ids[s];
      fed[q] += n_tokens[s];
      if (fed[q] == prompts[q].n) {
        answer[(size_t)q * RET_ANSWER_TOKENS] =
            kvl_cli_argmax(logits + (size_t)s * st->vocab, st->vocab);
        --left;
      }
    }
  }
  for (i = 0; i < n; ++i) seq_ids[i] = i;
  for (step = 1; step < RET_ANSWER_TOKENS; ++step) {
    for (i = 0; i < n; ++i) {
      tokens[i] = answer[(size_t)i * RET_ANSWER_TOKENS + step - 1];
      positions[i] = prompts[i].n + step - 1;
      n_tokens[i] = 1;
    }
    if (kvl_engine_forward(engine, n, seq_ids, n_tokens, tokens, positions, 0, logits, error,
                           sizeof error) != 0) {
      kvl_cli_error("%s", error);
      goto done;
    }
    for (i = 0; i < n; ++i) {
      answer[(size_t)i * RET_ANSWER_TOKENS + step] =
          kvl_cli_argmax(logits + (size_t)i * st->vocab, st->vocab);
    }
  }
  for (i = 0; i < n; ++i) {
    char text[512] = "";
    int32_t k, prev = -1;
    for (k = 0; k < RET_ANSWER_TOKENS; ++k) {
      const int32_t tok = answer[(size_t)i * RET_ANSWER_TOKENS + k];
      strncat(text, kvl_tokenizer_decode(st->tokenizer, prev, tok), sizeof text - strlen(text) - 1);
      prev = tok;
    }
    correct[i] = first_number(text) == prompts[i].key;
    digits[i] = digits_right(text, prompts[i].key);
    if (verbose) {
      char *c;
      for (c = text; *c != '\0'; ++c) {
        if (*c == '\n') *c = ' ';
      }
      fprintf(stderr, "  key %05d, %d tokens: '%s' %s\n", (int)prompts[i].key, (int)prompts[i].n,
              text, correct[i] ? "right" : "wrong");
    }
  }
  rc = 0;
done:
  kvl_engine_free(engine);
  kvc_cache_destroy(cache);
  free(fed);
  free(logits);
  free(answer);
  free(positions);
  free(tokens);
  free(n_tokens);
  free(seq_ids);
  return rc;
}

int kvl_eval_retrieval(int argc, char **argv) {
  const char *model_path = NULL, *tokenizer_path = NULL, *lengths_text = NULL;
  const char *depths_text = NULL, *keys_text = NULL, *policies_text = NULL;
  const char *budgets_text = NULL, *prefill_text = NULL, *chunk_text = NULL, *seed_text = NULL;
  kvl_cli_storage_text storage_text = {NULL, NULL, NULL, NULL};
  int retrieval = 0;
  const kvl_cli_option options[] = {
      {"--retrieval", NULL, &retrieval},    {"--model", &model_path, NULL},
      {"--tokenizer", &tokenizer_path, NULL}, {"--lengths", &lengths_text, NULL},
      {"--depths", &depths_text, NULL},     {"--keys", &keys_text, NULL},
      {"--policies", &policies_text, NULL}, {"--budgets", &budgets_text, NULL},
      {"--prefill", &prefill_text, NULL},   {"--chunk", &chunk_text, NULL},
      {"--seed", &seed_text, NULL},         KVL_CLI_STORAGE_OPTIONS(storage_text),
  };
  double lengths[RET_MAX_ITEMS], depths[RET_MAX_ITEMS], budgets[RET_MAX_ITEMS];
  const char *policies[RET_MAX_POLICIES];
  char *policy_list = NULL;
  int n_lengths, n_depths, n_budgets, n_policies = 0, li, di, pi, bi, rc;
  int32_t keys = 2, seed = 1, n_prompts, i;
  ret_prompt *prompts = NULL;
  int *correct = NULL, *digits = NULL;
  ret_state st;
  char error[1024];
  uint64_t rng;
  double t_start = kvl_cli_now();

  memset(&st, 0, sizeof st);
  st.chunk = 256;
  st.prefill = KVC_PREFILL_ONCE;
  rc = kvl_cli_parse(argc, argv, usage, options, sizeof options / sizeof options[0]);
  if (rc != KVL_EXIT_OK) return rc < 0 ? KVL_EXIT_OK : rc;
  if (model_path == NULL) return kvl_cli_usage_error(argv[0], usage, "--model is required");
  n_lengths = split_numbers(lengths_text ? lengths_text : "1024,2048,4096", lengths, RET_MAX_ITEMS);
  n_depths = split_numbers(depths_text ? depths_text : "0.1,0.5,0.9", depths, RET_MAX_ITEMS);
  n_budgets = split_numbers(budgets_text ? budgets_text : "0.125,0.25", budgets, RET_MAX_ITEMS);
  if (n_lengths < 1 || n_depths < 1 || n_budgets < 1) {
    return kvl_cli_usage_error(argv[0], usage,
                               "--lengths, --depths and --budgets expect up to %d comma-separated "
                               "positive numbers",
                               RET_MAX_ITEMS);
  }
  for (i = 0; i < n_depths; ++i) {
    if (depths[i] > 1.0) return kvl_cli_usage_error(argv[0], usage, "depths lie in (0, 1]");
  }
  if ((rc = kvl_cli_int(argv[0], usage, "--keys", keys_text, 1, 64, &keys)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--chunk", chunk_text, 2, 1L << 16, &st.chunk)) != 0 ||
      (rc = kvl_cli_int(argv[0], usage, "--seed", seed_text, 0, 2147483647L, &seed)) != 0 ||
      (rc = kvl_cli_storage_parse(argv[0], usage, &storage_text, &st.storage)) != 0) {
    return rc;
  }
  if (prefill_text != NULL) {
    if (strcmp(prefill_text, "once") == 0) {
      st.prefill = KVC_PREFILL_ONCE;
    } else if (strcmp(prefill_text, "per_chunk") == 0) {
      st.prefill = KVC_PREFILL_PER_CHUNK;
    } else {
      return kvl_cli_usage_error(argv[0], usage, "--prefill expects once or per_chunk");
    }
  }
  if (policies_text != NULL) {
    char *item;
    policy_list = (char *)malloc(strlen(policies_text) + 1);
    if (policy_list == NULL) return KVL_EXIT_FAILURE;
    strcpy(policy_list, policies_text);
    for (item = strtok(policy_list, ","); item != NULL && n_policies < RET_MAX_POLICIES;
         item = strtok(NULL, ",")) {
      policies[n_policies++] = item;
    }
  } else {
    for (; n_policies < (int)(sizeof default_policies / sizeof default_policies[0]); ++n_policies) {
      policies[n_policies] = default_policies[n_policies];
    }
  }

  tokenizer_path = kvl_cli_tokenizer_path(model_path, tokenizer_path);
  if (tokenizer_path == NULL) {
    free(policy_list);
    return KVL_EXIT_FAILURE;
  }
  if (kvl_model_load(model_path, &st.model, error, sizeof error) != 0 ||
      kvl_tokenizer_load(tokenizer_path, kvl_model_config(st.model)->vocab_size, &st.tokenizer,
                         error, sizeof error) != 0) {
    kvl_cli_error("%s", error);
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  {
    kvc_status *status = kvc_context_create(NULL, &st.context);
    if (status != NULL) {
      kvl_cli_error("kvc_context_create: %s", kvc_status_message(status));
      kvc_status_free(status);
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
  }
  for (pi = 0; pi < n_policies; ++pi) {
    if (kvl_cli_storage_check(st.context, st.model, &st.storage, policies[pi]) != 0) {
      rc = KVL_EXIT_FAILURE;
      goto done;
    }
  }
  st.vocab = kvl_model_config(st.model)->vocab_size;
  n_prompts = n_lengths * n_depths * keys;
  prompts = (ret_prompt *)calloc((size_t)n_prompts, sizeof *prompts);
  correct = (int *)calloc((size_t)n_prompts, sizeof(int));
  digits = (int *)calloc((size_t)n_prompts, sizeof(int));
  if (prompts == NULL || correct == NULL || digits == NULL) {
    kvl_cli_error("out of host memory");
    rc = KVL_EXIT_FAILURE;
    goto done;
  }
  rng = (uint64_t)seed * 6364136223846793005ull + 1442695040888963407ull;
  for (li = 0, i = 0; li < n_lengths; ++li) {
    for (di = 0; di < n_depths; ++di) {
      int32_t k;
      for (k = 0; k < keys; ++k, ++i) {
        int32_t key;
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        key = 10000 + (int32_t)((rng >> 33) % 90000);
        if (build_prompt(st.tokenizer, (int32_t)lengths[li], depths[di], key, &prompts[i]) != 0) {
          rc = KVL_EXIT_FAILURE;
          goto done;
        }
        prompts[i].length_index = li;
        prompts[i].depth_index = di;
      }
    }
  }

  {
    char storage[128];
    kvl_cli_storage_describe(&st.storage, storage, sizeof storage);
    printf("pass-key retrieval: %d prompts per length (%d depths x %d keys), prefill %s in "
           "chunks of %d, %s; right answers per prompt length\n",
           n_depths * (int)keys, n_depths, (int)keys,
           st.prefill == KVC_PREFILL_ONCE ? "once" : "per_chunk", (int)st.chunk, storage);
  }
  printf("%-12s %-7s", "policy", "budget");
  for (li = 0; li < n_lengths; ++li) {
    char head[32];
    snprintf(head, sizeof head, "%d", (int)lengths[li]);
    printf(" %8s", head);
  }
  printf("   by depth:");
  for (di = 0; di < n_depths; ++di) printf(" %5g", depths[di]);
  printf("\n");
  fflush(stdout);
  /* Configuration -1 is the full cache. */
  for (pi = -1; pi < n_policies; ++pi) {
    for (bi = 0; bi < (pi < 0 ? 1 : n_budgets); ++bi) {
      int by_length[RET_MAX_ITEMS] = {0}, by_depth[RET_MAX_ITEMS] = {0}, all = 0, n_digits = 0;
      const int per_length = n_depths * (int)keys;
      double t_run = kvl_cli_now();
      for (li = 0; li < n_lengths; ++li) {
        ret_prompt *batch = prompts + li * per_length;
        int32_t longest = 0, k;
        for (k = 0; k < per_length; ++k) longest = batch[k].n > longest ? batch[k].n : longest;
        if (run_batch(&st, pi < 0 ? NULL : policies[pi],
                      (int32_t)lround(budgets[bi] * longest), batch, per_length,
                      correct + li * per_length, digits + li * per_length, 1) != 0) {
          rc = KVL_EXIT_FAILURE;
          goto done;
        }
        for (k = 0; k < per_length; ++k) {
          by_length[li] += correct[li * per_length + k];
          by_depth[batch[k].depth_index] += correct[li * per_length + k];
          all += correct[li * per_length + k];
          n_digits += digits[li * per_length + k];
        }
      }
      {
        char budget[32];
        if (pi < 0) {
          snprintf(budget, sizeof budget, "-");
        } else {
          snprintf(budget, sizeof budget, "%g%%", 100.0 * budgets[bi]);
        }
        printf("%-12s %-7s", pi < 0 ? "full cache" : policies[pi], budget);
        for (li = 0; li < n_lengths; ++li) printf(" %5d/%-2d", by_length[li], per_length);
        printf("   ");
        for (di = 0; di < n_depths; ++di) {
          printf(" %2d/%-2d", by_depth[di], n_lengths * (int)keys);
        }
        printf("   all %d/%d, digits %.0f%%\n", all, n_prompts, 100.0 * n_digits / (5.0 * n_prompts));
        fflush(stdout);
        fprintf(stderr, "kvc-llama eval --retrieval: %s %s done (%.1f s)\n",
                pi < 0 ? "full cache" : policies[pi], budget, kvl_cli_now() - t_run);
      }
    }
  }
  printf("seconds=%.1f\n", kvl_cli_now() - t_start);
  rc = KVL_EXIT_OK;

done:
  if (prompts != NULL) {
    for (i = 0; i < n_prompts; ++i) free(prompts[i].tokens);
  }
  free(prompts);
  free(correct);
  free(digits);
  kvc_context_destroy(st.context);
  kvl_tokenizer_free(st.tokenizer);
  kvl_model_free(st.model);
  free(policy_list);
  return rc;
}
