#!/bin/sh
# Every C call in each language: for each function kvcache.h declares with KVC_API, the public
# Rust, Go and C# wrappers whose bodies call it, or the reason, listed below, why a language
# has none. The legacy kvc_X_init symbols (for binaries built against older headers) are no
# rows: bindings call kvc_X_init_sized.
# Usage: check_ffi_coverage.sh <source dir>           prints the markdown table
#        check_ffi_coverage.sh --check <source dir>   fails naming each C function a language
#                                                     misses, and when docs/ffi.md's table differs
#        check_ffi_coverage.sh --update <source dir>  writes the table into docs/ffi.md
set -eu
mode=print
case "${1-}" in --check | --update) mode=${1#--}; shift ;; esac
[ $# -eq 1 ] || { echo "usage: $0 [--check | --update] <source dir>" >&2; exit 2; }
root=$1
ffi=$root/examples/ffi

# language|C function|cell: a C function a language deliberately has no public wrapper for.
exceptions='
rust|kvc_status_get_code|internal: every `Error` is read from a status
rust|kvc_status_message|internal: every `Error` is read from a status
rust|kvc_status_free|internal: every `Error` is read from a status
rust|kvc_context_destroy|internal, when the last `Context` or `Cache` of a context drops
rust|kvc_context_plugin_info|internal, by `Context::plugins`
rust|kvc_context_set_logger|internal, by `Context::set_logger`, `Context::reset_logger`
rust|kvc_cache_get_params|internal, by `Context::cache`, `Context::cache_from_yaml` (`Cache::shape` returns it)
rust|kvc_cache_get_stats|internal, by `Cache::stats`
rust|kvc_cache_stats_init_sized|internal, by `Cache::stats`
rust|kvc_cache_policy_info|internal, by `Cache::policy_info`
rust|kvc_policy_info_init_sized|internal, by `Cache::policy_info`
rust|kvc_batch_init_sized|internal, by the calls that take a `Batch`
rust|kvc_attention_params_init_sized|internal, by the calls that take an `Attention`
go|kvc_status_get_code|internal: every `*Error` is read from a status
go|kvc_status_message|internal: every `*Error` is read from a status
go|kvc_status_free|internal: every `*Error` is read from a status
go|kvc_attention_params_init_sized|internal, by `(*Cache).Attend`, `(*Cache).AppendAttend`
csharp|kvc_status_get_code|internal: every `KvcacheException` is read from a status
csharp|kvc_status_message|internal: every `KvcacheException` is read from a status
csharp|kvc_status_free|internal: `StatusHandle` frees statuses
csharp|kvc_context_destroy|internal, by `Context.Dispose` (`ContextHandle`)
csharp|kvc_cache_destroy|internal, by `Cache.Dispose` (`CacheHandle`)
csharp|kvc_cache_params_init_sized|none: `CacheParams` fills its struct in C#; Tests/CacheTests.cs compares it
csharp|kvc_cache_stats_init_sized|none: `CacheStats` fills its struct in C#; Tests/CacheTests.cs compares it
csharp|kvc_policy_info_init_sized|none: `PolicyInfo` fills its struct in C#; Tests/CacheTests.cs compares it
csharp|kvc_attention_params_init_sized|none: `AttentionParams` fills its struct in C#; Tests/CacheTests.cs compares it
csharp|kvc_batch_init_sized|none: `Batch` fills its struct in C#; Tests/CacheTests.cs compares it
csharp|kvc_prefix_init_sized|none: `Prefix` fills its struct in C#; Tests/CacheTests.cs compares it
csharp|kvc_estimate_request_init_sized|none: `EstimateRequest` fills its struct in C#; Tests/CacheTests.cs compares it
'

# The C functions, in the header's order, each kvc_X_init under its kvc_X_init_sized (an _init
# without one would be a function of its own).
functions=$(grep -E '^KVC_API' "$root/capi/include/kvcache/kvcache.h" |
  sed -E 's/^[^(]*[^A-Za-z0-9_](kvc_[A-Za-z0-9_]+)[[:space:]]*\(.*/\1/' |
  awk '{ if (sub(/_init$/, "_init_sized")) legacy[$0] = 1; else if (!seen[$0]++) print }
       END { for (f in legacy) if (!seen[f]) { sub(/_sized$/, "", f); print f } }')

# Each language prints "C function<TAB>public wrapper" for each call it finds, a call to
# kvc_X_init (C's macro) named kvc_X_init_sized.
rust_calls() {
  # The types sequence_calls! (seq_ops.rs) writes its methods into.
  macro_types=$(sed -nE 's/^sequence_calls!\(([A-Za-z0-9_]+).*/\1/p' "$ffi"/rust/src/*.rs | tr '\n' ' ')
  # The names lib.rs exports: methods of other types and other functions are internal.
  exported=$(sed -nE 's/^pub use [a-z_]+::\{?([^}]*)\}?;/\1/p' "$ffi/rust/src/lib.rs" | tr -d , | tr '\n' ' ')
  awk -v macro_types="$macro_types" -v exported="$exported" '
    BEGIN { n = split(exported, e, " "); for (i = 1; i <= n; i++) public_name[e[i]] = 1 }
    FNR == 1 { type = ""; fn = "" }
    # impl blocks: the type, and whether its methods are public (a trait impl is).
    /^[[:space:]]*impl[<[:space:]]/ && !/\{[[:space:]]*\}[[:space:]]*$/ {
      line = $0; sub(/^[[:space:]]*impl(<[^>]*>)?[[:space:]]+/, "", line)
      trait = line ~ /^[A-Za-z0-9_:<>'"'"' ]+[[:space:]]for[[:space:]]/
      if (trait) sub(/^.*[[:space:]]for[[:space:]]+/, "", line)
      sub(/[<[:space:]{].*/, "", line)
      type = line; impl_indent = match($0, /[^[:space:]]/)
    }
    type != "" && /^[[:space:]]*}/ && match($0, /[^[:space:]]/) == impl_indent { type = "" }
    /^[[:space:]]*(pub(\([a-z]+\))?[[:space:]]+)?(unsafe[[:space:]]+)?(extern "C"[[:space:]]+)?fn[[:space:]]/ {
      name = $0; sub(/^.*fn[[:space:]]+/, "", name); sub(/[^A-Za-z0-9_].*/, "", name)
      owner = type == "" ? name : type
      public = (owner == "$type" || owner in public_name || (type == "" && FILENAME ~ /\/lib\.rs$/)) && ($0 ~ /^[[:space:]]*pub[[:space:]]/ || (type != "" && trait))
      if (type == "") fn = name
      else if (type == "$type") { fn = ""; n = split(macro_types, t, " ")
        for (i = 1; i <= n; i++) fn = fn (i > 1 ? "\n" : "") t[i] "::" name }
      else fn = type "::" name
    }
    {
      line = $0
      while (match(line, /sys::kvc_[a-z0-9_]+[[:space:]]*\(/)) {
        c = substr(line, RSTART + 5, RLENGTH - 5); sub(/[[:space:]]*\($/, "", c)
        line = substr(line, RSTART + RLENGTH)
        if (public && fn != "") { n = split(fn, w, "\n"); for (i = 1; i <= n; i++) print c "\t" w[i] }
      }
    }' "$ffi"/rust/src/*.rs
}

go_calls() {
  awk '
    FNR == 1 { fn = ""; helper = "" }
    # The cgo preamble: C helpers named go_kvc_*, and the kvc_ functions each calls.
    /^\/\/ static [^(]*go_kvc_[a-z0-9_]+\(/ {
      helper = $0; sub(/\(.*/, "", helper); sub(/.*[^a-z0-9_]/, "", helper); next
    }
    /^\/\// && helper != "" {
      line = $0
      while (match(line, /(go_)?kvc_[a-z0-9_]+\(/)) {
        c = substr(line, RSTART, RLENGTH - 1); line = substr(line, RSTART + RLENGTH)
        sub(/_init$/, "_init_sized", c); uses[helper] = uses[helper] " " c
      }
      next
    }
    !/^\/\// { helper = "" }
    /^func / {
      name = $0; sub(/^func[[:space:]]+/, "", name); receiver = ""
      if (name ~ /^\(/) {
        receiver = name; sub(/\).*/, "", receiver); sub(/^\([^[:space:]]*[[:space:]]+/, "", receiver)
        sub(/^[^)]*\)[[:space:]]*/, "", name)
      }
      sub(/[^A-Za-z0-9_].*/, "", name)
      bare = receiver; sub(/^\*/, "", bare)
      public = name ~ /^[A-Z]/ && (receiver == "" || bare ~ /^[A-Z]/)
      fn = receiver == "" ? name : (receiver ~ /^\*/ ? "(" receiver ")." name : receiver "." name)
    }
    /^func / || /^[[:space:]]/ {
      line = $0
      while (match(line, /C\.(go_)?kvc_[a-z0-9_]+\(/)) {
        c = substr(line, RSTART + 2, RLENGTH - 3); line = substr(line, RSTART + RLENGTH)
        if (public) calls[++ncalls] = c "\t" fn
      }
    }
    function expand(c, fn, depth,   n, i, u) {
      if (c !~ /^go_/) { print c "\t" fn; return }
      if (depth > 8) return
      n = split(uses[c], u, " "); for (i = 1; i <= n; i++) expand(u[i], fn, depth + 1)
    }
    END { for (i = 1; i <= ncalls; i++) { split(calls[i], p, "\t"); expand(p[1], p[2], 0) } }
  ' $(ls "$ffi"/go/*.go | grep -v '_test\.go$')
}

csharp_calls() {
  awk '
    FNR == 1 { class = ""; public_class = 0; member = "" }
    /^[[:space:]]*(public[[:space:]]+|internal[[:space:]]+)?((static|sealed|unsafe|partial)[[:space:]]+)*class[[:space:]]/ {
      class = $0; sub(/^.*class[[:space:]]+/, "", class); sub(/[^A-Za-z0-9_].*/, "", class)
      public_class = $0 ~ /^[[:space:]]*public[[:space:]]/; next
    }
    # A member: a declaration with an access modifier that is not a field.
    /^[[:space:]]+(public|internal|private|protected)[[:space:]]/ && !/;[[:space:]]*$/ {
      decl = $0; sub(/[[:space:]]*(=>|\{).*$/, "", decl)
      if (decl ~ /\(/) { sub(/[[:space:]]*\(.*/, "", decl) }
      sub(/.*[^A-Za-z0-9_]/, "", decl)
      member = decl == class ? "new " class : class "." decl
      public = public_class && $0 ~ /^[[:space:]]+public[[:space:]]/
    }
    {
      line = $0
      while (match(line, /NativeMethods\.kvc_[a-z0-9_]+[[:space:]]*\(/)) {
        c = substr(line, RSTART + 14, RLENGTH - 14); sub(/[[:space:]]*\($/, "", c)
        line = substr(line, RSTART + RLENGTH)
        if (public && member != "") print c "\t" member
      }
    }' "$ffi"/csharp/Kvcache/*.cs
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rust_calls | sort -u >"$tmp/rust"
go_calls | sort -u >"$tmp/go"
csharp_calls | sort -u >"$tmp/csharp"
printf '%s\n' "$exceptions" | grep -v '^$' >"$tmp/exceptions"

# The table, and a line "FAIL: ..." on stderr for each gap or stale exception.
table() {
  echo '| C function | Rust | Go | C# |'
  echo '| --- | --- | --- | --- |'
  for fn in $functions; do
    row="| \`$fn\` |"
    for lang in rust go csharp; do
      wrappers=$(awk -F '\t' -v fn="$fn" '$1 == fn { printf "%s`%s`", (n++ ? ", " : ""), $2 }' "$tmp/$lang")
      reason=$(awk -F '|' -v lang="$lang" -v fn="$fn" '$1 == lang && $2 == fn { print $3 }' "$tmp/exceptions")
      if [ -n "$wrappers" ] && [ -n "$reason" ]; then
        echo "FAIL: $fn has the $lang wrapper $wrappers and the exception \"$reason\": drop the exception" >&2
        cell=$wrappers
      elif [ -n "$wrappers" ]; then cell=$wrappers
      elif [ -n "$reason" ]; then cell=$reason
      else
        echo "FAIL: $fn has no $lang wrapper and no exception in $0" >&2
        cell='**missing**'
      fi
      row="$row $cell |"
    done
    echo "$row"
  done
}

doc=$root/docs/ffi.md
if [ "$mode" = print ]; then
  table
  exit 0
fi
if [ "$mode" = update ]; then
  table >"$tmp/table"
  awk -v table="$tmp/table" '
    /<!-- ffi-table:end -->/ { skip = 0 }
    !skip { print }
    /<!-- ffi-table:begin -->/ { skip = 1; while ((getline line <table) > 0) print line }
  ' "$doc" >"$tmp/doc" && cat "$tmp/doc" >"$doc"
  exit 0
fi
status=0
table >"$tmp/table" 2>"$tmp/failures"
if [ -s "$tmp/failures" ]; then cat "$tmp/failures"; status=1; fi
sed -n '/<!-- ffi-table:begin -->/,/<!-- ffi-table:end -->/p' "$doc" | sed '1d;$d' >"$tmp/documented"
if ! diff -u "$tmp/documented" "$tmp/table" >"$tmp/diff"; then
  echo "FAIL: the table in docs/ffi.md differs from the bindings (- docs, + generated);"
  echo "      regenerate it with: sh tests/check_ffi_coverage.sh --update ."
  cat "$tmp/diff"
  status=1
fi
[ "$status" -eq 0 ] && echo "OK: each C function has a wrapper or a listed reason in Rust, Go and C#, and docs/ffi.md lists them"
exit "$status"
