# run_fuzz.cmake: the fuzz_frontend_60s test (cmake -P).
#
# Makes a fresh corpus in WORK_DIR/corpus from every input the project ships
# (models/, clusters/, tests/bad/, tests/fuzz/seeds/) and runs the fuzzer for
# SECONDS.  A crash, leak, timeout or sanitizer report fails the test; the
# reproducer is WORK_DIR/crash-* (or leak-*, timeout-*, oom-*): run
# `FUZZER REPRODUCER` to see it again.
#
#   cmake -DFUZZER=.../fuzz_frontend -DSOURCE_DIR=... -DWORK_DIR=... -DSECONDS=60 -P run_fuzz.cmake
foreach(var FUZZER SOURCE_DIR WORK_DIR SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzz.cmake: set -D${var}=...")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/corpus)
file(GLOB seeds
  ${SOURCE_DIR}/models/*.xml
  ${SOURCE_DIR}/clusters/*.xml
  ${SOURCE_DIR}/tests/bad/*
  ${SOURCE_DIR}/tests/fuzz/seeds/*)
list(FILTER seeds EXCLUDE REGEX "/EXPECT$")
list(LENGTH seeds n_seeds)
if(n_seeds LESS 10)
  message(FATAL_ERROR "run_fuzz.cmake: expected at least 10 seed files, found ${n_seeds}")
endif()
file(COPY ${seeds} DESTINATION ${WORK_DIR}/corpus)
message(STATUS "fuzzing for ${SECONDS} s from ${n_seeds} seeds in ${WORK_DIR}/corpus")

execute_process(
  COMMAND ${FUZZER}
    -max_total_time=${SECONDS} -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
    -dict=${SOURCE_DIR}/tests/fuzz/xml.dict
    -artifact_prefix=${WORK_DIR}/
    ${WORK_DIR}/corpus
  WORKING_DIRECTORY ${WORK_DIR}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(GLOB found ${WORK_DIR}/crash-* ${WORK_DIR}/leak-* ${WORK_DIR}/timeout-* ${WORK_DIR}/oom-*)
  message(FATAL_ERROR "fuzz_frontend exited with ${rc}; reproducer(s): ${found}\n"
                      "run again with: ${FUZZER} <reproducer>")
endif()
