# The check against the ODR hazard of the per-architecture xsimd kernels (include/stile/kernels/
# xsimd_abi.hpp): cmake -DNM=<nm> -DOBJECTS=<object;object;...> -P check_xsimd_symbols.cmake
# Fails (with the symbols named) if an object
#   - defines a global or weak function (nm types T, W, i, u) whose name does not lie in an inline
#     namespace xsimd_abi...: such a function (an inline function of the standard library, of
#     stile::Error, ...) would be compiled with this object's -m flags under the same name as the
#     copies in the rest of the program, and the linker keeps one copy for all callers;
#   - uses more than one such namespace, or the same one as another object (two instruction sets
#     under one name);
#   - has a static initializer (_GLOBAL__sub_I_*), which would run this object's instructions at
#     start-up on any CPU.
# Data symbols are not checked: they hold no instructions (the table the dispatcher reads, typeinfo).
# The baseline object (stile_xsimd_baseline.cpp) is compiled with the library's own flags, like
# every other object of it, so it cannot bring instructions that the rest lacks: it is skipped (on
# AArch64 it is the only one, and it defines xsimd's NEON wrappers, non-template inline functions).
cmake_minimum_required(VERSION 3.21)
if(NOT NM OR NOT OBJECTS)
  message(FATAL_ERROR "usage: cmake -DNM=<nm> -DOBJECTS=<objects> -P check_xsimd_symbols.cmake")
endif()
set(_failures "")
set(_seen_namespaces "")
foreach(_obj IN LISTS OBJECTS)
  if(_obj MATCHES "stile_xsimd_baseline")
    message(STATUS "${_obj}: the library's own flags, not checked")
    continue()
  endif()
  execute_process(COMMAND "${NM}" -C -g --defined-only "${_obj}" OUTPUT_VARIABLE _out RESULT_VARIABLE _rc
                  ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${_obj}: ${_err}")
  endif()
  string(REPLACE ";" "\\;" _out "${_out}")
  string(REPLACE "\n" ";" _lines "${_out}")
  set(_namespaces "")
  set(_functions 0)
  foreach(_line IN LISTS _lines)
    if(NOT _line MATCHES "^[0-9a-fA-F]* ([A-Za-z]) (.*)$")
      continue()
    endif()
    set(_type "${CMAKE_MATCH_1}")
    set(_name "${CMAKE_MATCH_2}")
    if(NOT _type MATCHES "^[TWiu]$")
      continue()
    endif()
    math(EXPR _functions "${_functions} + 1")
    if(_name MATCHES "::(xsimd_abi[A-Za-z0-9_]*)::")
      list(APPEND _namespaces "${CMAKE_MATCH_1}")
    else()
      string(APPEND _failures "\n  ${_obj}: '${_name}' (${_type}) is not in an xsimd_abi namespace")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _namespaces)
  list(LENGTH _namespaces _count)
  if(_count GREATER 1)
    string(APPEND _failures "\n  ${_obj}: functions in several namespaces: ${_namespaces}")
  endif()
  foreach(_ns IN LISTS _namespaces)
    if(_ns IN_LIST _seen_namespaces)
      string(APPEND _failures "\n  ${_obj}: namespace ${_ns} is another object's too (the same flags twice?)")
    endif()
    list(APPEND _seen_namespaces "${_ns}")
  endforeach()
  execute_process(COMMAND "${NM}" "${_obj}" OUTPUT_VARIABLE _all RESULT_VARIABLE _rc)
  if(_all MATCHES "_GLOBAL__sub_I")
    string(APPEND _failures "\n  ${_obj}: has a static initializer")
  endif()
  message(STATUS "${_obj}: ${_functions} global functions, namespace ${_namespaces}")
endforeach()
if(_failures)
  message(FATAL_ERROR "xsimd kernels: ODR hazard (see include/stile/core/xsimd_abi.hpp):${_failures}")
endif()
