#!/bin/sh
# prefix_store.sh KVC_LLAMA MODEL TOKENIZER disk|redis|redis_cluster: `kvc-llama generate
# --prefix-store` across processes. A first process prefills the prompt and saves its whole
# chunks to the store; a second, a new process, must restore floor((n - 1) / 16) * 16 tokens of
# it (n: the prompt's tokens; the last chunk is prefilled again, for the last token's logits)
# and sample from logits equal bit for bit to a run without the store, then print the same
# text. A prompt of 3 whole chunks
# (48 ids) goes first; then one of 53 ids that starts with it, whose first process restores
# the 48 tokens the other saved. Last, a process prefilling in steps of 5 (not dividing 16,
# so no equal logits to keep) restores all 48 tokens of the first prompt but its last; a copy
# of the model file restores 32 of them, and a copy with its last byte changed none.
# `disk` uses a temporary folder; `redis` the server in KVC_TEST_REDIS (host:port) and
# `redis_cluster` the Redis Cluster whose nodes KVC_TEST_REDIS_CLUSTER lists (host:port,...),
# each exiting 77 (skipped) without its variable.
set -eu
kvl=$1 model=$2 tokenizer=$3 kind=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

case $kind in
  disk) plugin=disk params="{ path: \"$work/store\" }" ;;
  redis)
    if [ -z "${KVC_TEST_REDIS:-}" ]; then
      echo "skipped: KVC_TEST_REDIS (host:port of a Redis server) is not set"
      exit 77
    fi
    plugin=redis params="{ host: \"${KVC_TEST_REDIS%:*}\", port: ${KVC_TEST_REDIS##*:} }" ;;
  redis_cluster)
    if [ -z "${KVC_TEST_REDIS_CLUSTER:-}" ]; then
      echo "skipped: KVC_TEST_REDIS_CLUSTER (host:port,... of a Redis Cluster) is not set"
      exit 77
    fi
    plugin=redis params="{ nodes: \"$KVC_TEST_REDIS_CLUSTER\" }" ;;
  *) echo "prefix_store.sh: unknown store kind '$kind'" >&2; exit 2 ;;
esac
printf 'stores:\n  prefixes: { plugin: %s, params: %s }\n' "$plugin" "$params" >"$work/config.yaml"

# Prompts of token ids unique to this run (so that a server shared with earlier runs holds
# none of their chunks), BOS first.
salt=$(( ($$ + $(date +%s)) % 100000 ))
ids() { # ids N: N prompt ids
  awk -v n="$1" -v salt="$salt" 'BEGIN {
    printf "1"
    for (i = 1; i < n; ++i) printf " %d", (salt * 7 + i * 31 + i * i) % 509 + 3
    print ""
  }'
}
status=0
check() { # check DESCRIPTION GOT EXPECTED
  if [ "$2" = "$3" ]; then
    echo "ok: $1 ($2)"
  else
    echo "FAIL: $1: got '$2', expected '$3'"
    status=1
  fi
}
run() { # run NAME N [ARG...]: the prompt of N ids in steps of 8 (unless ARGs say otherwise);
  # logits in $work/NAME.logits, text in NAME.out, stderr in NAME.err
  name=$1 ids_n=$2
  shift 2
  "$kvl" generate --model "$model" --tokenizer "$tokenizer" --token-ids "$work/prompt$ids_n.ids" \
    --steps 16 --chunk 8 --dump-logits "$work/$name.logits" "$@" >"$work/$name.out" \
    2>"$work/$name.err" || {
    echo "kvc-llama failed ($name, $ids_n tokens):"
    cat "$work/$name.err"
    exit 1
  }
}
value() { sed -n "s/^$1=//p" "$work/$2.err"; }
store="--config $work/config.yaml --prefix-store prefixes --prefix-chunk 16"

prompt_case() { # prompt_case N RESTORED: the three processes on a prompt of N ids; the first
  # must restore RESTORED tokens
  n=$1 restored_first=$2
  ids "$n" >"$work/prompt$n.ids"
  run plain "$n"
  # shellcheck disable=SC2086 # $store is a list of arguments
  run first "$n" $store
  # shellcheck disable=SC2086
  run second "$n" $store
  check "$n tokens: first process's restored tokens" "$(value prefix_tokens_restored first)" \
    "$restored_first"
  check "$n tokens: first process saves the prompt's whole chunks" \
    "$(value prefix_tokens_saved first)" $((n / 16 * 16))
  check "$n tokens: second process restores the chunks before the last token's" \
    "$(value prefix_tokens_restored second)" $(((n - 1) / 16 * 16))
  for name in first second; do
    if cmp "$work/plain.logits" "$work/$name.logits"; then
      echo "ok: $n tokens: $name process's first-token logits equal the run without the store"
    else
      echo "FAIL: $n tokens: $name process's first-token logits differ from the run without" \
        "the store"
      status=1
    fi
    cmp -s "$work/plain.out" "$work/$name.out" || {
      echo "FAIL: $n tokens: $name process's text differs from the run without the store"
      status=1
    }
  done
}
prompt_case 48 0
prompt_case 53 48
# Prefill steps of 5 do not divide the chunks of 16, so equal logits cannot be had: every whole
# chunk is restored and only the last token computed.
# shellcheck disable=SC2086
run steps5 48 $store --chunk 5
check "48 tokens, prefill steps of 5: restored tokens" "$(value prefix_tokens_restored steps5)" 47
# The chunks are keyed by the model file's bytes, not its name: a copy restores them, a copy
# with its last byte changed (another model) restores nothing.
cp "$model" "$work/copy.bin"
cp "$model" "$work/changed.bin"
size=$(wc -c <"$model")
printf '\001' | dd of="$work/changed.bin" bs=1 seek=$((size - 1)) conv=notrunc 2>/dev/null
cmp -s "$model" "$work/changed.bin" && { echo "FAIL: could not change the model's copy"; exit 1; }
model_used=$model
for copy in copy changed; do
  model=$work/$copy.bin
  # shellcheck disable=SC2086
  run "$copy" 48 $store
done
model=$model_used
check "48 tokens, a copy of the model: restored tokens" "$(value prefix_tokens_restored copy)" 32
check "48 tokens, a changed copy of the model: restored tokens" \
  "$(value prefix_tokens_restored changed)" 0
exit $status
