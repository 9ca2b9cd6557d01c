include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PSRT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/psrt)

install(TARGETS psrt psrt_base psrt_transport_core psrt_transport psrt_kernels psrt_device psrt_ps
                psrt_runtime
        EXPORT psrtTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(PSRT_HAVE_CUDA)
  # psrt_kernels links it: the CUDA update (kernels/fused_sgd_cuda.cu).
  install(TARGETS psrt_kernels_cuda EXPORT psrtTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
if(PSRT_HAVE_UCX)
  install(TARGETS psrt_transport_ucx EXPORT psrtTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
if(PSRT_HAVE_TORCH)
  # psrt::torch: the LibTorch integration (include/psrt/torch.h); pstrain and pseval.
  install(TARGETS psrt_torch EXPORT psrtTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(TARGETS pstrain pseval RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(FILES include/psrt/torch.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/psrt)
endif()
install(DIRECTORY include/psrt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN torch.h EXCLUDE)
install(FILES ${CMAKE_BINARY_DIR}/generated/psrt/config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/psrt)
# Internal layer headers that the public ones reach (transport/ for the transport API).
install(DIRECTORY base transport DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/psrt/internal
        FILES_MATCHING PATTERN "*.h")
install(TARGETS psbench psrun RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(EXPORT psrtTargets NAMESPACE psrt:: DESTINATION ${PSRT_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/psrtConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/psrtConfig.cmake
                              INSTALL_DESTINATION ${PSRT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/psrtConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/psrtConfig.cmake ${CMAKE_BINARY_DIR}/psrtConfigVersion.cmake
        DESTINATION ${PSRT_INSTALL_CMAKEDIR})
