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
# Libs carries an rpath to libdir, so that a consumer built from an install outside the
# loader's default folders (cgo's `#cgo pkg-config` among them) runs without LD_LIBRARY_PATH.
# Its folders exist only once installed, so the build tree keeps it where no pkg-config search
# looks (CMakeFiles/, as install(EXPORT) does with its install-only files).
set(KVC_PC_CFLAGS "-I\${includedir}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/kvcache.pc.in
               ${PROJECT_BINARY_DIR}/CMakeFiles/kvcache.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/CMakeFiles/kvcache.pc
  DESTINATION ${KVC_INSTALL_PKGCONFIGDIR}
  COMPONENT Development)

# The build tree's own kvcache.pc, in <build>/<libdir>/pkgconfig next to libkvcache: the
# headers of the source tree and the generated ones, the library and its plugins where the
# build puts them. PKG_CONFIG_PATH=<build>/<libdir>/pkgconfig builds a consumer (the Go
# binding, examples/ffi/go) against the build tree as against an install.
set(KVC_PC_PREFIX "${PROJECT_BINARY_DIR}")
set(KVC_PC_LIBDIR "${CMAKE_LIBRARY_OUTPUT_DIRECTORY}")
set(KVC_PC_INCLUDEDIR "${PROJECT_SOURCE_DIR}/capi/include")
set(KVC_PC_CFLAGS "-I\${includedir} -I${PROJECT_BINARY_DIR}/include")
configure_file(${PROJECT_SOURCE_DIR}/cmake/kvcache.pc.in
               ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}/pkgconfig/kvcache.pc @ONLY)
