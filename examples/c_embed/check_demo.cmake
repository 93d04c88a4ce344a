# ctest kvc.c_embed: cmake -DDEMO=<kvc-c-demo> -P check_demo.cmake runs the demo, which stops
# with an error on any unexpected status, and checks that every section printed its result.
execute_process(COMMAND ${DEMO} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kvc-c-demo exited with ${rc}\n${out}${err}")
endif()
foreach(expected
    "prefill: one batch of 201 tokens"
    "-> OUT_OF_MEMORY: "
    "cache unchanged: yes"
    "fork: seq 4 = a fork of seq 2 [(]104 tokens[)], sharing its blocks"
    "decode: 4 steps of both branches in one batch"
    "lengths: seq 2 = 108, seq 4 = 108 tokens"
    "truncate at position 109: seq 4 holds 109 tokens"
    "import: as seq 5; lengths match seq 4 on every layer and KV head: yes"
    "stats after removing every sequence:\n  memory :     0.0 KiB used")
  if(NOT out MATCHES "${expected}")
    message(FATAL_ERROR "kvc-c-demo did not print '${expected}'\n${out}")
  endif()
endforeach()
