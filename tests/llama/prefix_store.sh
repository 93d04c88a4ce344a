#!/bin/sh
# prefix_store.sh KVC_LLAMA MODEL TOKENIZER disk|redis: `kvc-llama generate --prefix-store`
# across processes. A first process prefills the prompt and saves its whole chunks to the
# store; a second, a new process, must restore floor((n - 1) / 16) * 16 tokens of it (n: the
# prompt's tokens; the last is always prefilled) and sample from logits equal bit for bit to a
# run without the store, then print the same text. `disk` uses a temporary folder; `redis` the
# server in KVC_TEST_REDIS (host:port) and exits 77 (skipped) without it.
set -eu
kvl=$1 model=$2 tokenizer=$3 kind=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

case $kind in
  disk) params="{ path: \"$work/store\" }" ;;
  redis)
    if [ -z "${KVC_TEST_REDIS:-}" ]; then
      echo "skipped: KVC_TEST_REDIS (host:port of a Redis server) is not set"
      exit 77
    fi
    params="{ host: \"${KVC_TEST_REDIS%:*}\", port: ${KVC_TEST_REDIS##*:} }" ;;
  *) echo "prefix_store.sh: unknown store kind '$kind'" >&2; exit 2 ;;
esac
printf 'stores:\n  prefixes: { plugin: %s, params: %s }\n' "$kind" "$params" >"$work/config.yaml"

# The run's own first words make every chunk key new, so that a server shared with earlier
# runs holds none of them.
prompt="Run $$ $(date +%s%N). Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."
run() { # run NAME [ARG...]: logits in $work/NAME.logits, text in NAME.out, stderr in NAME.err
  name=$1
  shift
  "$kvl" generate --model "$model" --tokenizer "$tokenizer" --prompt "$prompt" --steps 16 \
    --chunk 8 --dump-logits "$work/$name.logits" "$@" >"$work/$name.out" 2>"$work/$name.err" || {
    echo "kvc-llama failed ($name):"
    cat "$work/$name.err"
    exit 1
  }
}
value() { sed -n "s/^$1=//p" "$work/$2.err"; }
with_store="--config $work/config.yaml --prefix-store prefixes --prefix-chunk 16"

run plain
# shellcheck disable=SC2086 # with_store is a list of arguments
run first $with_store
# shellcheck disable=SC2086
run second $with_store

n=$(sed -n 's/^prefill: \([0-9]*\) tokens.*/\1/p' "$work/plain.err")
whole=$(((n - 1) / 16 * 16))
status=0
check() { # check DESCRIPTION GOT EXPECTED
  if [ "$2" = "$3" ]; then
    echo "ok: $1 ($2)"
  else
    echo "FAIL: $1: got '$2', expected '$3'"
    status=1
  fi
}
[ "$whole" -ge 32 ] || { echo "FAIL: the prompt has $n tokens, too few for two chunks"; exit 1; }
check "first process restores nothing" "$(value prefix_tokens_restored first)" 0
check "first process saves the prompt's whole chunks" "$(value prefix_tokens_saved first)" \
  $((n / 16 * 16))
check "second process restores the chunks before the last token" \
  "$(value prefix_tokens_restored second)" "$whole"
for name in first second; do
  if cmp "$work/plain.logits" "$work/$name.logits"; then
    echo "ok: $name process's first-token logits equal the run without the store"
  else
    echo "FAIL: $name process's first-token logits differ from the run without the store"
    status=1
  fi
  cmp -s "$work/plain.out" "$work/$name.out" || {
    echo "FAIL: $name process's text differs from the run without the store"
    status=1
  }
done
exit $status
