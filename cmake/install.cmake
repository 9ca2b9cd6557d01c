include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PSRT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/psrt)

install(TARGETS psrt psrt_base psrt_transport_core psrt_transport_crypto psrt_transport psrt_kernels
                psrt_device psrt_ps_session psrt_ps psrt_runtime
        EXPORT psrtTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(PSRT_HAVE_CUDA)
  # psrt_kernels links it: the CUDA update (kernels/fused_sgd_cuda.cu).
  install(TARGETS psrt_kernels_cuda EXPORT psrtTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
endif()
if(PSRT_HAVE_UCX)
  install(TARGETS psrt_transport_ucx EXPORT psrtTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
endif()
if(PSRT_HAVE_TORCH)
  # psrt::torch: the LibTorch integration (include/psrt/torch.h); pstrain and pseval.
  install(TARGETS psrt_torch EXPORT psrtTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
  install(TARGETS pstrain pseval RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
  install(FILES include/psrt/torch.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/psrt COMPONENT dev)
endif()
install(DIRECTORY include/psrt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
        PATTERN torch.h EXCLUDE)
install(FILES ${CMAKE_BINARY_DIR}/generated/psrt/config.h ${CMAKE_BINARY_DIR}/generated/psrt/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/psrt COMPONENT dev)
# Internal layer headers that the public ones reach (transport/ for the transport API).
install(DIRECTORY base transport DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/psrt/internal COMPONENT dev
        FILES_MATCHING PATTERN "*.h")
install(TARGETS psbench psrun RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)

install(EXPORT psrtTargets NAMESPACE psrt:: DESTINATION ${PSRT_INSTALL_CMAKEDIR} COMPONENT dev)
configure_package_config_file(cmake/psrtConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/psrtConfig.cmake
                              INSTALL_DESTINATION ${PSRT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/psrtConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/psrtConfig.cmake ${CMAKE_BINARY_DIR}/psrtConfigVersion.cmake
        DESTINATION ${PSRT_INSTALL_CMAKEDIR} COMPONENT dev)
