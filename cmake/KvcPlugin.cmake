# kvc_add_plugin(<target> SOURCES ...): a plugin shared library that libkvcache loads at run
# time. It links only the public headers (never libkvcache) and exports only its entry point,
# marked KVC_PLUGIN_EXPORT (test kvc.plugin_exports).
function(kvc_add_plugin target)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE kvcache_headers)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY ${KVC_PLUGIN_OUTPUT_DIRECTORY}
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  # Hidden visibility still exports the standard library's template instantiations (namespace
  # std has default visibility; unoptimised builds are full of them): the version script
  # leaves exactly the entry point.
  set(exports ${PROJECT_SOURCE_DIR}/cmake/kvc_plugin.map)
  target_link_options(${target} PRIVATE
    "LINKER:--version-script=${exports}" "LINKER:--exclude-libs,ALL" "LINKER:--no-undefined")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${exports})
  set_property(GLOBAL APPEND PROPERTY KVC_PLUGIN_TARGETS ${target})
  install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/${KVC_PLUGIN_SUBDIR})
endfunction()
