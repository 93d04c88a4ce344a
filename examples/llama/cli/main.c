/*
 * kvc-llama: run llama2.c checkpoints with kvcache holding all K/V and computing attention.
 *
 *   kvc-llama generate --model stories260K.bin --tokenizer tok512.bin --prompt "Once upon"
 *   kvc-llama ppl --model stories260K.bin --tokenizer tok512.bin --text tom_sawyer.txt
 *   kvc-llama compare --model m.gguf --token-ids t.ids --config q8_0.yaml --baseline-config f16.yaml
 *
 * Each subcommand lives in its own file (cli/cmd_<name>.c); this file only dispatches.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} command;

static const command commands[] = {
    {"generate", kvl_cmd_generate, "generate text from a prompt (greedy by default)"},
    {"ppl", kvl_cmd_ppl, "teacher-forced perplexity of a text file"},
    {"eval", kvl_cmd_eval, "perplexity and continuation NLL per eviction policy and budget"},
    {"compare", kvl_cmd_compare, "a cache config against a baseline config: KL, agreement"},
};

static void usage(FILE *out) {
  size_t i;
  fprintf(out,
          "usage: kvc-llama <command> [options]\n"
          "\n"
          "Runs llama2.c checkpoints with kvcache (%s) storing all K/V and computing attention.\n"
          "\n"
          "commands:\n",
          kvc_version_string());
  for (i = 0; i < sizeof commands / sizeof commands[0]; ++i) {
    fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  }
  fprintf(out, "\n'kvc-llama <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
  size_t i;
  if (argc < 2) {
    usage(stderr);
    return KVL_EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return KVL_EXIT_OK;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("kvc-llama (kvcache %s)\n", kvc_version_string());
    return KVL_EXIT_OK;
  }
  for (i = 0; i < sizeof commands / sizeof commands[0]; ++i) {
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
  }
  fprintf(stderr, "kvc-llama: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return KVL_EXIT_USAGE;
}
