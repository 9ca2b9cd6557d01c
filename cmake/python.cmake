# PSRT_WITH_PYTHON: the module `import psrt` (python/). Needs LibTorch (PSRT_HAVE_TORCH), pybind11
# and an interpreter with its development files that imports torch. Pick the interpreter with
# -DPython3_EXECUTABLE=/usr/bin/python3; without it, the first of `python3` on PATH and
# /usr/bin/python3 that imports torch is taken (say which one in the configure output).
set(_python_found FALSE)
if(PSRT_WITH_PYTHON MATCHES "^(ON|on|TRUE|1|YES)$" AND NOT PSRT_HAVE_TORCH)
  message(FATAL_ERROR "PSRT_WITH_PYTHON=ON needs the LibTorch integration: configure with "
                      "-DPSRT_WITH_TORCH=AUTO or ON (apt-get install libtorch-dev python3-torch)")
endif()
if(PSRT_SANITIZE AND NOT PSRT_WITH_PYTHON MATCHES "^(OFF|off|FALSE|0|NO)$")
  # An instrumented extension loads only into an interpreter started with the sanitizer's runtime
  # preloaded; the sanitizer builds test the C++ code.
  message(STATUS "PSRT_WITH_PYTHON: off in a sanitizer build (PSRT_SANITIZE=${PSRT_SANITIZE})")
elseif(NOT PSRT_WITH_PYTHON MATCHES "^(OFF|off|FALSE|0|NO)$" AND PSRT_HAVE_TORCH)
  if(NOT Python3_EXECUTABLE)
    find_program(_psrt_path_python3 python3)
    foreach(candidate ${_psrt_path_python3} /usr/bin/python3)
      if(EXISTS "${candidate}")
        execute_process(COMMAND "${candidate}" -c "import torch" RESULT_VARIABLE _rc
                        OUTPUT_QUIET ERROR_QUIET TIMEOUT 60)
        if(_rc EQUAL 0)
          set(Python3_EXECUTABLE "${candidate}" CACHE FILEPATH "The interpreter psrt's module is built for")
          break()
        endif()
      endif()
    endforeach()
  endif()
  if(Python3_EXECUTABLE)
    find_package(Python3 QUIET COMPONENTS Interpreter Development.Module)
    find_package(pybind11 CONFIG QUIET)
    if(Python3_FOUND AND pybind11_FOUND)
      set(_python_found TRUE)
    endif()
  endif()
endif()
if(PSRT_SANITIZE)
  set(PSRT_HAVE_PYTHON 0)
else()
  psrt_resolve_feature(PSRT_WITH_PYTHON "${_python_found}"
                       "pybind11-dev python3-dev python3-torch (and LibTorch: libtorch-dev)")
endif()
if(PSRT_HAVE_PYTHON)
  message(STATUS "psrt Python module for ${Python3_EXECUTABLE} (Python ${Python3_VERSION})")
  # Where `cmake --install` puts the package, relative to CMAKE_INSTALL_PREFIX: the interpreter's
  # own layout (lib/python3.X/dist-packages on Debian, site-packages elsewhere).
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c
            "import sys; d = 'dist-packages' if any(p.endswith('dist-packages') for p in sys.path) else 'site-packages'; print(f'lib/python{sys.version_info[0]}.{sys.version_info[1]}/{d}', end='')"
    OUTPUT_VARIABLE _psrt_python_dir)
  set(PSRT_PYTHON_INSTALL_DIR "${_psrt_python_dir}" CACHE STRING
      "Where cmake --install puts the psrt Python package, relative to the prefix")
endif()
