find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)  # TF_CONFIG (runtime/engine_env.cc)

find_package(ucx CONFIG QUIET)
psrt_resolve_feature(PSRT_WITH_UCX "${ucx_FOUND}" "libucx-dev")

include(CheckLanguage)
set(_cuda_found FALSE)
if(NOT PSRT_WITH_CUDA MATCHES "^(OFF|off|FALSE|0|NO)$")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
    set(_cuda_found ${CUDAToolkit_FOUND})
  endif()
endif()
psrt_resolve_feature(PSRT_WITH_CUDA "${_cuda_found}" "the CUDA toolkit at /usr/local/cuda")
if(PSRT_HAVE_CUDA)
  # At the top level so every directory can compile and link CUDA code (kernels/ builds it).
  enable_language(CUDA)
endif()

set(_torch_found FALSE)
if(NOT PSRT_WITH_TORCH MATCHES "^(OFF|off|FALSE|0|NO)$")
  find_package(Torch QUIET)
  set(_torch_found ${Torch_FOUND})
endif()
psrt_resolve_feature(PSRT_WITH_TORCH "${_torch_found}" "libtorch-dev")

include(cmake/python.cmake)

message(STATUS "psrt features: UCX=${PSRT_HAVE_UCX} CUDA=${PSRT_HAVE_CUDA} TORCH=${PSRT_HAVE_TORCH} "
               "PYTHON=${PSRT_HAVE_PYTHON}")
