# Feature switches. AUTO turns a feature on when its dependency is found; ON makes a missing
# dependency a configuration error that names the Debian package to install; OFF skips it.
set(PSRT_WITH_UCX AUTO CACHE STRING "UCX transport backend: AUTO, ON or OFF")
set(PSRT_WITH_CUDA AUTO CACHE STRING "CUDA kernels and device-memory paths: AUTO, ON or OFF")
set(PSRT_WITH_TORCH AUTO CACHE STRING "LibTorch integration and pstrain: AUTO, ON or OFF")
set(PSRT_WITH_PYTHON AUTO CACHE STRING "The Python module (import psrt; needs Torch): AUTO, ON or OFF")
set(PSRT_SANITIZE "" CACHE STRING "Build with sanitizers: address, undefined, address,undefined, thread or empty")
option(PSRT_BUILD_TESTS "Build the test suite" ON)
foreach(opt PSRT_WITH_UCX PSRT_WITH_CUDA PSRT_WITH_TORCH PSRT_WITH_PYTHON)
  set_property(CACHE ${opt} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${opt}}" _v)
  if(NOT _v MATCHES "^(AUTO|ON|OFF|TRUE|FALSE|1|0|YES|NO)$")
    message(FATAL_ERROR "${opt}=${${opt}}: use AUTO, ON or OFF")
  endif()
endforeach()
set_property(CACHE PSRT_SANITIZE PROPERTY STRINGS "" address undefined "address,undefined" thread)

# psrt_resolve_feature(<option> <found-bool> <debian-package>) sets PSRT_HAVE_<X> to 0/1.
function(psrt_resolve_feature opt found package)
  string(TOUPPER "${${opt}}" mode)
  string(REPLACE "PSRT_WITH_" "PSRT_HAVE_" have "${opt}")
  if(mode MATCHES "^(OFF|FALSE|0|NO)$")
    set(${have} 0 PARENT_SCOPE)
  elseif(found)
    set(${have} 1 PARENT_SCOPE)
  elseif(mode MATCHES "^(ON|TRUE|1|YES)$")
    message(FATAL_ERROR "${opt}=ON but the dependency was not found: install it with "
                        "'apt-get install ${package}' (or run scripts/install_deps.sh), "
                        "or configure with -D${opt}=AUTO")
  else()
    message(STATUS "${opt}=AUTO: not found (${package}); building without it")
    set(${have} 0 PARENT_SCOPE)
  endif()
endfunction()
