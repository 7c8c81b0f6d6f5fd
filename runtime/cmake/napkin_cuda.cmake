# SPDX-License-Identifier: Apache-2.0
# Included by the top-level CMakeLists.txt before option(NAPKIN_CUDA): decides the option's
# default. It is ON when nvcc is found (check_language) and the pinned CuTe/CUTLASS headers are
# installed (the nvidia-cutlass PyPI package), so `make test` compiles the sm_90a kernels
# wherever it can, GPU or not.
include(CheckLanguage)

# napkin_find_cutlass(<var>): the include directory of the nvidia-cutlass package, or "".
function(napkin_find_cutlass out)
  # The python3 on PATH: the one tools/install_deps.sh ran `python3 -m pip install` with.
  find_program(NAPKIN_PYTHON3 NAMES python3)
  set(dir "")
  if(NAPKIN_PYTHON3)
    execute_process(
      COMMAND ${NAPKIN_PYTHON3} -c
              "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
      OUTPUT_VARIABLE dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0 OR NOT EXISTS "${dir}/cute/tensor.hpp")
      set(dir "")
    endif()
  endif()
  set(${out} "${dir}" PARENT_SCOPE)
endfunction()

set(NAPKIN_CUDA_DEFAULT OFF)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  napkin_find_cutlass(_napkin_cutlass)
  if(_napkin_cutlass)
    set(NAPKIN_CUDA_DEFAULT ON)
  else()
    message(STATUS "nvcc found but not the nvidia-cutlass headers: NAPKIN_CUDA defaults to OFF")
  endif()
endif()
