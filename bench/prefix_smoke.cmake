# kvc.bench_prefix*: runs `kvc-bench prefix` on small sizes and checks its accounting against
# what the prefix cache must do: without it every request prefills its whole prompt; with it
# requests 2..N each attach the whole system prompt (one prefix hit each; kvc_prefix_lookup
# says so before request 2 arrives) and prefill only their question, the peak K/V is smaller,
# the chat prefills less, and the logits of both modes are bit-identical
# (prefix_logits_identical=1); under a memory limit smaller than the prompts they publish, no
# request fails, cached blocks are reclaimed, the peak stays within the limit and the most
# recently used prompt is still found whole. Timings are not compared: speed is for the
# benchmark itself.
#
#   cmake -DBENCH=<kvc-bench> -DREQUESTS=N -DPREFIX=N -DQUESTION=N -DNEW=N -DCHUNK=N
#         [-DARGS=<more options, ;-separated>] -P prefix_smoke.cmake
cmake_minimum_required(VERSION 3.25)

function(fail what)
  message(FATAL_ERROR "prefix_smoke: ${what}")
endfunction()

foreach(var BENCH REQUESTS PREFIX QUESTION NEW CHUNK)
  if(NOT DEFINED ${var})
    fail("-D${var}=... is required")
  endif()
endforeach()

execute_process(
  COMMAND "${BENCH}" prefix --requests=${REQUESTS} --prefix_tokens=${PREFIX}
          --question_tokens=${QUESTION} --new_tokens=${NEW} --chunk_tokens=${CHUNK}
          --turns=3 --turn_tokens=64 --reply_tokens=16 --pressure_requests=16
          --pressure_prompts=6 --pressure_prefix_tokens=64 --pressure_cached=2 --progress=0
          ${ARGS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  fail("kvc-bench prefix exited with ${rc}\nstdout:\n${out}\nstderr:\n${err}")
endif()

# The integer of the line `name=value`, into the variable `name`.
function(integer name)
  if(NOT out MATCHES "(^|\n)${name}=([0-9]+)\n")
    fail("no line '${name}=<integer>' in the output:\n${out}")
  endif()
  set(${name} "${CMAKE_MATCH_2}" PARENT_SCOPE)
endfunction()

# Every figure of the report is there, as a number.
foreach(name IN ITEMS cpu_model load_average)
  if(NOT out MATCHES "(^|\n)${name}=[^\n]+\n")
    fail("no ${name} line:\n${out}")
  endif()
endforeach()
foreach(name IN ITEMS prefix_off_ttft_first_s prefix_off_ttft_rest_mean_s prefix_off_tokens_per_s
                      prefix_on_ttft_first_s prefix_on_ttft_rest_mean_s prefix_on_tokens_per_s
                      prefix_chat_off_ttft_rest_mean_s prefix_chat_on_ttft_rest_mean_s
                      prefix_chat_prefill_tokens_ratio prefix_chat_ttft_ratio
                      prefix_throughput_ratio prefix_prefill_tokens_ratio prefix_peak_kv_ratio
                      prefix_ttft_ratio)
  if(NOT out MATCHES "\n${name}=[0-9][0-9.e+-]*\n")
    fail("no line '${name}=<number>':\n${out}")
  endif()
endforeach()

integer(prefix_off_prefill_tokens)
integer(prefix_on_prefill_tokens)
integer(prefix_on_attached_tokens)
integer(prefix_on_prefix_hits)
integer(prefix_on_prefix_tokens_reused)
integer(prefix_on_lookup_tokens)
integer(prefix_off_peak_kv_bytes)
integer(prefix_on_peak_kv_bytes)
integer(prefix_chat_off_prefill_tokens)
integer(prefix_chat_on_prefill_tokens)
integer(prefix_logits_identical)
integer(prefix_pressure_failed)
integer(prefix_pressure_reclaimed_bytes)
integer(prefix_pressure_peak_bytes)
integer(prefix_pressure_limit_bytes)
integer(prefix_pressure_recent_kept)

math(EXPR prompt "${PREFIX} + ${QUESTION}")
math(EXPR others "${REQUESTS} - 1")
math(EXPR expected_off "${REQUESTS} * ${prompt}")
math(EXPR expected_on "${prompt} + ${others} * ${QUESTION}")
math(EXPR expected_attached "${others} * ${PREFIX}")
foreach(pair IN ITEMS "prefix_off_prefill_tokens;${expected_off}"
                      "prefix_on_prefill_tokens;${expected_on}"
                      "prefix_on_attached_tokens;${expected_attached}"
                      "prefix_on_prefix_hits;${others}"
                      "prefix_on_lookup_tokens;${PREFIX}"
                      "prefix_on_prefix_tokens_reused;${expected_attached}")
  list(GET pair 0 name)
  list(GET pair 1 expected)
  if(NOT ${name} EQUAL expected)
    fail("${name}=${${name}}, expected ${expected}:\n${out}")
  endif()
endforeach()
if(NOT prefix_on_peak_kv_bytes LESS prefix_off_peak_kv_bytes)
  fail("peak K/V ${prefix_on_peak_kv_bytes} bytes with the prefix cache, not less than "
       "${prefix_off_peak_kv_bytes} without")
endif()
if(NOT prefix_chat_on_prefill_tokens LESS prefix_chat_off_prefill_tokens)
  fail("the chat prefilled ${prefix_chat_on_prefill_tokens} tokens with the prefix cache, not "
       "fewer than ${prefix_chat_off_prefill_tokens} without")
endif()
if(NOT prefix_logits_identical EQUAL 1)
  fail("the logits differ between the modes:\n${out}")
endif()
if(NOT prefix_pressure_failed EQUAL 0)
  fail("${prefix_pressure_failed} requests failed under the memory limit:\n${out}\n${err}")
endif()
if(prefix_pressure_reclaimed_bytes EQUAL 0 OR prefix_pressure_recent_kept LESS 1 OR
   prefix_pressure_peak_bytes GREATER prefix_pressure_limit_bytes)
  fail("under the memory limit: ${prefix_pressure_reclaimed_bytes} bytes reclaimed, "
       "${prefix_pressure_recent_kept} recent prompts found whole, peak "
       "${prefix_pressure_peak_bytes} of ${prefix_pressure_limit_bytes} bytes:\n${out}")
endif()
message("prefix_smoke: prefill tokens ${prefix_off_prefill_tokens} -> "
        "${prefix_on_prefill_tokens}, peak K/V ${prefix_off_peak_kv_bytes} -> "
        "${prefix_on_peak_kv_bytes} bytes, chat prefill ${prefix_chat_off_prefill_tokens} -> "
        "${prefix_chat_on_prefill_tokens}, logits identical")
