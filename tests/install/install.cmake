# cmake --install and the Debian package (issue 21; cmake/install.cmake). Both tests write only
# under this build directory (install-test/, deb-test/) and put back the install_manifest.txt of
# the builds they install; they share that file, hence the lock.
if(GFSHIM_MPI STREQUAL "openmpi")
  set(gfshim_other_flavour mpich)
else()
  set(gfshim_other_flavour openmpi)
endif()
if(GFSHIM_CUDA_BUILT)
  set(gfshim_plugin_installed yes)
else()
  set(gfshim_plugin_installed no)
endif()
set(gfshim_install_dirs --source ${PROJECT_SOURCE_DIR} --build ${CMAKE_BINARY_DIR}
    --flavour ${GFSHIM_MPI} --plugin ${gfshim_plugin_installed} --libdir ${CMAKE_INSTALL_LIBDIR}
    --bindir ${CMAKE_INSTALL_BINDIR} --docdir ${CMAKE_INSTALL_DOCDIR})

# This flavour, and the other one where its build exists (GFSHIM_OTHER_FLAVOUR_BUILD, from
# GFSHIM_OTHER_FLAVOUR_SHIM): side by side in one prefix, --help, uninstall. The Open MPI build
# given the other build requires it (scripts/build.sh builds both).
set(gfshim_layout_other "")
if(GFSHIM_OTHER_FLAVOUR_BUILD)
  set(gfshim_layout_other --other-build ${GFSHIM_OTHER_FLAVOUR_BUILD}
      --other-flavour ${gfshim_other_flavour})
  if(GFSHIM_MPI STREQUAL "openmpi")
    list(APPEND gfshim_layout_other --require-other)
  endif()
endif()
add_test(NAME install_prefix_layout
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install/check_install_layout.sh ${gfshim_install_dirs}
                 ${gfshim_layout_other})
set_tests_properties(install_prefix_layout PROPERTIES
                     PASS_REGULAR_EXPRESSION "install prefix layout: ok"
                     RESOURCE_LOCK gfshim_install_manifest TIMEOUT 300)

# The .deb of both flavours, installed into and removed from a scratch root by dpkg: in the
# Open MPI build, which knows the MPICH one.
find_program(GFSHIM_DPKG dpkg)
if(GFSHIM_MPI STREQUAL "openmpi" AND GFSHIM_OTHER_FLAVOUR_BUILD AND GFSHIM_DPKG)
  add_test(NAME install_deb_installs_and_removes
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install/check_deb.sh --cpack ${CMAKE_CPACK_COMMAND}
                   ${gfshim_install_dirs} --other-build ${GFSHIM_OTHER_FLAVOUR_BUILD}
                   --other-flavour ${gfshim_other_flavour})
  set_tests_properties(install_deb_installs_and_removes PROPERTIES
                       PASS_REGULAR_EXPRESSION "deb install and removal: ok"
                       RESOURCE_LOCK gfshim_install_manifest TIMEOUT 900)
endif()
