# Runs a command that must fail and checks its output holds every pattern of EXPECT (a ;-list):
#   cmake -DCMD=<cmd;args> -DEXPECT=<regex;regex> -P expect_output.cmake
# Used for the MPI fault tests, where each surviving rank must print its own error.
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
set(all "${out}${err}")
message("${all}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the command succeeded; it should have failed")
endif()
foreach(pattern ${EXPECT})
  if(NOT all MATCHES "${pattern}")
    message(FATAL_ERROR "missing from the output: ${pattern}")
  endif()
endforeach()
