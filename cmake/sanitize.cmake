if(PSRT_SANITIZE)
  # address and undefined combine (one build checks both, as `make test-sanitize` does);
  # thread stands alone.
  if(NOT PSRT_SANITIZE MATCHES "^(address|undefined|thread|address,undefined|undefined,address)$")
    message(FATAL_ERROR
      "PSRT_SANITIZE=${PSRT_SANITIZE}: use address, undefined, address,undefined or thread")
  endif()
  # C and C++ only: nvcc does not take these flags (the CUDA update is not sanitised).
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${PSRT_SANITIZE};-fno-omit-frame-pointer;-g>")
  add_link_options(-fsanitize=${PSRT_SANITIZE})
  if(PSRT_SANITIZE MATCHES "undefined")
    add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>")
  endif()
endif()
