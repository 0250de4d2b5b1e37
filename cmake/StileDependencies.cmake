# Finds what stile's headers need, for stile's own build and for hosts (installed with the
# package config). All of it comes from Debian bookworm packages: libhwy-dev (Highway 1.0.3),
# libxsimd-dev (xsimd 8.1), nlohmann-json3-dev, libutf8proc-dev, libpcre2-dev (PCRE2 10.42, the
# tokenizer's regular expressions), libxxhash-dev (xxHash 0.8), and,
# optionally, liburing-dev (liburing 2.3) for the io_uring read backend.
include_guard(GLOBAL)
include(CMakeFindDependencyMacro)

macro(stile_find_dependencies)
  find_package(Threads REQUIRED)
  find_package(hwy CONFIG REQUIRED)
  find_package(xsimd CONFIG REQUIRED)
  stile_fix_xsimd()
  find_package(nlohmann_json 3.11 CONFIG REQUIRED)
  stile_find_utf8proc()
  stile_find_pcre2()
  stile_find_xxhash()
  stile_find_liburing()
endmacro()

# Debian's utf8proc ships no CMake package. find_path/find_library (not pkg-config) honour the
# toolchain file's CMAKE_FIND_ROOT_PATH and CMAKE_LIBRARY_ARCHITECTURE, so the aarch64 cross
# build finds the arm64 multiarch library with nothing else to set.
function(stile_find_utf8proc)
  if(TARGET stile::utf8proc)
    return()
  endif()
  find_path(STILE_UTF8PROC_INCLUDE_DIR utf8proc.h REQUIRED)
  find_library(STILE_UTF8PROC_LIBRARY NAMES utf8proc REQUIRED)
  add_library(stile::utf8proc UNKNOWN IMPORTED GLOBAL)
  set_target_properties(stile::utf8proc PROPERTIES
    IMPORTED_LOCATION "${STILE_UTF8PROC_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${STILE_UTF8PROC_INCLUDE_DIR}")
endfunction()

# PCRE2 (BSD), the 32-bit code-unit library: the tokenizer.json pipeline's regular expressions
# (text/regex.hpp) match on code points with Unicode properties (PCRE2_UTF | PCRE2_UCP) and JIT.
# Found like utf8proc, for the same reason (the cross build's multiarch directory).
function(stile_find_pcre2)
  if(TARGET stile::pcre2)
    return()
  endif()
  find_path(STILE_PCRE2_INCLUDE_DIR pcre2.h REQUIRED)
  find_library(STILE_PCRE2_LIBRARY NAMES pcre2-32 REQUIRED)
  add_library(stile::pcre2 UNKNOWN IMPORTED GLOBAL)
  set_target_properties(stile::pcre2 PROPERTIES
    IMPORTED_LOCATION "${STILE_PCRE2_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${STILE_PCRE2_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS "PCRE2_CODE_UNIT_WIDTH=32")
endfunction()

# xxHash (the shard store's checksums) is used header-only (XXH_INLINE_ALL), so only its header
# is needed: an interface target that adds its directory, nothing to link. Debian's libxxhash-dev
# puts xxhash.h in /usr/include, which the aarch64 cross build also searches (include mode BOTH).
function(stile_find_xxhash)
  if(TARGET stile::xxhash)
    return()
  endif()
  find_path(STILE_XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
  add_library(stile::xxhash INTERFACE IMPORTED GLOBAL)
  set_target_properties(stile::xxhash PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${STILE_XXHASH_INCLUDE_DIR}")
endfunction()

# liburing (io/read_backend.hpp's io_uring backend) is optional: stile::liburing always exists, so
# the exported stile target can name it, and carries the library and STILE_HAVE_IO_URING=1 only
# when liburing was found. Without it (the aarch64 cross build, where liburing-dev:arm64 is not
# installed; a host that sets STILE_IO_URING=OFF) the backend is compiled out and
# open_read_backend falls back to pread with a note. Found like utf8proc, so a cross build looks
# only in its own multiarch directory and never picks up the build machine's library.
function(stile_find_liburing)
  if(TARGET stile::liburing)
    return()
  endif()
  add_library(stile::liburing INTERFACE IMPORTED GLOBAL)
  if(DEFINED STILE_IO_URING AND NOT STILE_IO_URING)
    message(STATUS "stile: io_uring read backend disabled (STILE_IO_URING=OFF)")
    return()
  endif()
  find_path(STILE_LIBURING_INCLUDE_DIR liburing.h)
  find_library(STILE_LIBURING_LIBRARY NAMES uring)
  if(STILE_LIBURING_INCLUDE_DIR AND STILE_LIBURING_LIBRARY)
    set_target_properties(stile::liburing PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${STILE_LIBURING_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${STILE_LIBURING_LIBRARY}"
      INTERFACE_COMPILE_DEFINITIONS "STILE_HAVE_IO_URING=1")
  else()
    message(STATUS "stile: liburing not found; the io_uring read backend is compiled out")
  endif()
endfunction()

# Debian's xsimd 8.1 exports INTERFACE_LINK_LIBRARIES "xtl", but xsimd does not need xtl (it is
# only used by optional xtl-complex support) and Debian does not install a CMake target for it,
# so any consumer fails at link time with "-lxtl not found". Strip it.
function(stile_fix_xsimd)
  if(NOT TARGET xsimd)
    message(FATAL_ERROR "stile: xsimd was found but defines no 'xsimd' target")
  endif()
  get_target_property(_libs xsimd INTERFACE_LINK_LIBRARIES)
  if(_libs)
    list(REMOVE_ITEM _libs xtl)
    set_target_properties(xsimd PROPERTIES INTERFACE_LINK_LIBRARIES "${_libs}")
  endif()
endfunction()

# stile_xsimd_sources(OUT DIR): the per-architecture sources of stile::compiled's xsimd kernels
# (include/stile/kernels/number_formats.hpp) in DIR for the processor being built for, each with
# its architecture's flags as a source property of the calling directory (where stile_compiled is
# added): stile_xsimd_baseline.cpp always (the library's own flags), and on x86-64
# stile_xsimd_avx2.cpp and stile_xsimd_avx512.cpp. The dispatcher picks one per CPU at run time.
function(stile_xsimd_sources out dir)
  set(_sources "${dir}/stile_xsimd_baseline.cpp")
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND CMAKE_SIZEOF_VOID_P EQUAL 8)
    set(_avx512 -mavx512f -mavx512cd -mavx512dq -mavx512bw -mfma)
    # GCC 12's avx512fintrin.h initializes _mm512_undefined_*() from itself, which its own
    # -Wmaybe-uninitialized (and -Wuninitialized, where a kernel runs on a buffer of constant
    # length) reports inside xsimd's AVX-512 kernels (GCC bug 105593, fixed in 13).
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
      list(APPEND _avx512 -Wno-maybe-uninitialized -Wno-uninitialized)
    endif()
    set_source_files_properties("${dir}/stile_xsimd_avx2.cpp" PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma")
    set_source_files_properties("${dir}/stile_xsimd_avx512.cpp" PROPERTIES COMPILE_OPTIONS "${_avx512}")
    list(APPEND _sources "${dir}/stile_xsimd_avx2.cpp" "${dir}/stile_xsimd_avx512.cpp")
  endif()
  set(${out} ${_sources} PARENT_SCOPE)
endfunction()

# Eigen (Debian's libeigen3-dev, MPL-2.0), header-only: the offline factorization of the word
# table (quant/lowrank_factorize.hpp) in the converter and the tools and tests that factorize.
# Not part of stile_find_dependencies: the runtime, and so a host, never needs it.
function(stile_find_eigen)
  if(TARGET stile::eigen)
    return()
  endif()
  find_path(STILE_EIGEN_INCLUDE_DIR Eigen/Dense PATH_SUFFIXES eigen3 REQUIRED)
  add_library(stile::eigen INTERFACE IMPORTED GLOBAL)
  set_target_properties(stile::eigen PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${STILE_EIGEN_INCLUDE_DIR}")
endfunction()

# Open MPI (Debian's libopenmpi-dev, BSD-3-Clause), optional: the MPI communicator of dist/
# (dist/mpi_communicator.hpp), stile-dist-run and the MPI tests. stile::mpi always exists and
# carries MPI and STILE_HAVE_MPI=1 only when found; without it the communicator says it is absent.
# Not looked for in a cross build (no arm64 MPI is installed for it).
function(stile_find_mpi)
  if(TARGET stile::mpi)
    return()
  endif()
  add_library(stile::mpi INTERFACE IMPORTED GLOBAL)
  if((DEFINED STILE_MPI AND NOT STILE_MPI) OR CMAKE_CROSSCOMPILING)
    message(STATUS "stile: MPI not used (STILE_MPI=OFF or a cross build): dist/ has its in-process communicator only")
    return()
  endif()
  find_package(MPI COMPONENTS CXX QUIET)  # the C API, through the CXX component (stile is a CXX project)
  if(MPI_CXX_FOUND)
    set_target_properties(stile::mpi PROPERTIES
      INTERFACE_LINK_LIBRARIES MPI::MPI_CXX
      INTERFACE_COMPILE_DEFINITIONS "STILE_HAVE_MPI=1")
    set(STILE_HAVE_MPI ON PARENT_SCOPE)
  else()
    message(STATUS "stile: MPI not found (apt-get install libopenmpi-dev openmpi-bin): no MPI communicator, "
      "stile-dist-run and the MPI tests are not built")
  endif()
endfunction()

# COIN-OR CLP (Debian's coinor-libclp-dev, EPL-2.0: weak copyleft, fine to link from an app; no GPL),
# optional: the LP of the multi-device partitioner (plan/lp_partition.hpp). stile::clp carries the
# library and STILE_HAVE_CLP=1 only when found; without it the partitioner says it is absent.
function(stile_find_clp)
  if(TARGET stile::clp)
    return()
  endif()
  add_library(stile::clp INTERFACE IMPORTED GLOBAL)
  if((DEFINED STILE_CLP AND NOT STILE_CLP) OR CMAKE_CROSSCOMPILING)
    message(STATUS "stile: COIN-OR CLP not used (STILE_CLP=OFF or a cross build): no LP partitioner")
    return()
  endif()
  find_path(STILE_CLP_INCLUDE_DIR ClpSimplex.hpp PATH_SUFFIXES coin)
  find_library(STILE_CLP_LIBRARY NAMES Clp)
  find_library(STILE_COINUTILS_LIBRARY NAMES CoinUtils)
  if(STILE_CLP_INCLUDE_DIR AND STILE_CLP_LIBRARY AND STILE_COINUTILS_LIBRARY)
    set_target_properties(stile::clp PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${STILE_CLP_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${STILE_CLP_LIBRARY};${STILE_COINUTILS_LIBRARY}"
      INTERFACE_COMPILE_DEFINITIONS "STILE_HAVE_CLP=1")
    set(STILE_HAVE_CLP ON PARENT_SCOPE)
  else()
    message(STATUS "stile: COIN-OR CLP not found (apt-get install coinor-libclp-dev): the LP partitioner is absent")
  endif()
endfunction()

# OpenCL with CLBlast (Debian's ocl-icd-opencl-dev, opencl-headers, libclblast-dev; PoCL,
# pocl-opencl-icd, runs it on the CPU), optional: the OpenCL processor (hetero/opencl_device.hpp).
# stile::opencl always exists and carries OpenCL, CLBlast and STILE_HAVE_OPENCL=1 only when both
# are found; without them the processor says it is absent. Not looked for in a cross build (no
# arm64 OpenCL is installed for it).
function(stile_find_opencl)
  if(TARGET stile::opencl)
    return()
  endif()
  add_library(stile::opencl INTERFACE IMPORTED GLOBAL)
  if((DEFINED STILE_OPENCL AND NOT STILE_OPENCL) OR CMAKE_CROSSCOMPILING)
    message(STATUS "stile: OpenCL not used (STILE_OPENCL=OFF or a cross build): no OpenCL processor")
    return()
  endif()
  find_package(OpenCL QUIET)
  find_package(CLBlast CONFIG QUIET)
  if(OpenCL_FOUND AND CLBlast_FOUND)
    set_target_properties(stile::opencl PROPERTIES
      INTERFACE_LINK_LIBRARIES "OpenCL::OpenCL;clblast"
      INTERFACE_COMPILE_DEFINITIONS "STILE_HAVE_OPENCL=1;CL_TARGET_OPENCL_VERSION=120")
    set(STILE_HAVE_OPENCL ON PARENT_SCOPE)
  else()
    message(STATUS "stile: OpenCL or CLBlast not found (apt-get install ocl-icd-opencl-dev opencl-headers "
      "libclblast-dev pocl-opencl-icd): no OpenCL processor")
  endif()
endfunction()
