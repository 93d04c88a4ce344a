# Install rules: libkvcache, the public headers, the CMake package `kvcache` (targets
# kvcache::kvcache and kvcache::kvcache_headers) and the pkg-config file kvcache.pc.
# Plugins install themselves (cmake/KvcPlugin.cmake) into <libdir>/kvcache/plugins, where
# libkvcache looks for them by default.
#
# Components: `Runtime` (the shared object and plugins' SONAME link) and `Development`
# (headers, the unversioned .so link, CMake package and pkg-config file). A plain
# `cmake --install <build>` installs both.

include(CMakePackageConfigHelpers)

set(KVC_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvcache
    CACHE STRING "Where kvcacheConfig.cmake is installed, relative to the prefix")
set(KVC_INSTALL_PKGCONFIGDIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig
    CACHE STRING "Where kvcache.pc is installed, relative to the prefix")

# ---------------------------------------------------------------- library and headers
install(TARGETS kvcache kvcache_headers
  EXPORT kvcacheTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    COMPONENT Runtime
    NAMELINK_COMPONENT Development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The hand-written public headers (C API, plugin ABI, C++ wrapper) ...
install(DIRECTORY ${PROJECT_SOURCE_DIR}/capi/include/kvcache
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT Development
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
# ... and the two that CMake generates (export macros, compile-time version).
install(FILES
    ${PROJECT_BINARY_DIR}/include/kvcache/kvcache_export.h
    ${PROJECT_BINARY_DIR}/include/kvcache/kvcache_version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvcache
  COMPONENT Development)

# ------------------------------------------------------------------ CMake package
install(EXPORT kvcacheTargets
  NAMESPACE kvcache::
  FILE kvcacheTargets.cmake
  DESTINATION ${KVC_INSTALL_CMAKEDIR}
  COMPONENT Development)

set(KVC_PACKAGE_PLUGIN_DIR ${CMAKE_INSTALL_LIBDIR}/${KVC_PLUGIN_SUBDIR})
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/kvcacheConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/kvcacheConfig.cmake
  INSTALL_DESTINATION ${KVC_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR KVC_PACKAGE_PLUGIN_DIR)
# The ABI (and so the API contract) may change with the major version.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/cmake/kvcacheConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
    ${PROJECT_BINARY_DIR}/cmake/kvcacheConfig.cmake
    ${PROJECT_BINARY_DIR}/cmake/kvcacheConfigVersion.cmake
  DESTINATION ${KVC_INSTALL_CMAKEDIR}
  COMPONENT Development)

# ------------------------------------------------------------------- pkg-config
# The .pc file is relocatable: its prefix is found from its own folder (${pcfiledir}), so an
# install with `cmake --install <build> --prefix <dir>` works whatever prefix was configured.
# An absolute CMAKE_INSTALL_LIBDIR / INCLUDEDIR is written as is.
if(IS_ABSOLUTE "${KVC_INSTALL_PKGCONFIGDIR}")
  set(KVC_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _kvc_pc_up "/kvc_prefix/${KVC_INSTALL_PKGCONFIGDIR}" "/kvc_prefix")
  string(REGEX REPLACE "/$" "" _kvc_pc_up "${_kvc_pc_up}")
  set(KVC_PC_PREFIX "\${pcfiledir}/${_kvc_pc_up}")
endif()
foreach(_kvc_dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_kvc_dir}}")
    set(KVC_PC_${_kvc_dir} "${CMAKE_INSTALL_${_kvc_dir}}")
  else()
    set(KVC_PC_${_kvc_dir} "\${prefix}/${CMAKE_INSTALL_${_kvc_dir}}")
  endif()
endforeach()
# Its folders exist only once installed, so the build tree keeps it where no pkg-config search
# looks (CMakeFiles/, as install(EXPORT) does with its install-only files).
configure_file(${PROJECT_SOURCE_DIR}/cmake/kvcache.pc.in
               ${PROJECT_BINARY_DIR}/CMakeFiles/kvcache.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/CMakeFiles/kvcache.pc
  DESTINATION ${KVC_INSTALL_PKGCONFIGDIR}
  COMPONENT Development)
