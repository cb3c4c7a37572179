# cmake --install, the uninstall target and the Debian package (issue 21).
#
# Layout under the prefix P (GNUInstallDirs; LIBDIR is "lib" unless configured otherwise):
#   P/lib/gfshim/<flavour>/libgfshim.so        the shim for one MPI flavour (openmpi or mpich)
#   P/lib/gfshim/<flavour>/libgfshim_cuda.so   the NCCL plugin, beside the shim that dlopens it
#   P/lib/gfshim/<flavour>/gfshim-info         linked to that flavour's MPI
#   P/bin/gfshim-info                          a wrapper that runs one flavour's gfshim-info
#   P/bin/gfshimrun                            the launcher
#   P/share/doc/gfshim/README.md, docs/...     the documentation
# The two flavours build in two build directories; installing both into one prefix puts them
# side by side. Two components: "flavour" (P/lib/gfshim/<flavour>/) and "common" (bin/ and the
# documentation, the same from either build), so the package built from one build directory
# takes only the "flavour" part of the other (CPACK_INSTALL_CMAKE_PROJECTS below).
#
# Uninstall: `cmake --build BUILD --target uninstall` removes the files listed in
# BUILD/install_manifest.txt (the last `cmake --install` of that build; cmake/uninstall.cmake).
# With both flavours in one prefix, uninstall both builds.

# The documentation goes to share/doc/gfshim (GNUInstallDirs' default would be .../libgfshim).
if(NOT DEFINED CACHE{CMAKE_INSTALL_DOCDIR})
  set(CMAKE_INSTALL_DOCDIR "share/doc/gfshim" CACHE PATH "Documentation (DATAROOTDIR/doc/gfshim)")
endif()
include(GNUInstallDirs)
set(GFSHIM_INSTALL_FLAVOUR_DIR "${CMAKE_INSTALL_LIBDIR}/gfshim/${GFSHIM_MPI}")

# ---- per flavour: the shim, its plugin beside it, and gfshim-info ----------------------------
# Their run path is their MPI's library directory where it lies outside the system's (Open MPI
# from Debian: /usr/lib/x86_64-linux-gnu/openmpi/lib), the same built and installed: they link no
# library of the build tree, and CMake then neither pads the built one (with a trailing ':', an
# empty entry) nor rewrites it at install.
set_target_properties(gfshim gfshim-info PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE
                      BUILD_WITH_INSTALL_RPATH TRUE)
install(TARGETS gfshim LIBRARY DESTINATION ${GFSHIM_INSTALL_FLAVOUR_DIR} COMPONENT flavour)
if(TARGET gfshim_cuda)
  install(TARGETS gfshim_cuda LIBRARY DESTINATION ${GFSHIM_INSTALL_FLAVOUR_DIR} COMPONENT flavour)
endif()
install(TARGETS gfshim-info RUNTIME DESTINATION ${GFSHIM_INSTALL_FLAVOUR_DIR} COMPONENT flavour)

# ---- common: the launcher, the gfshim-info wrapper, the documentation ------------------------
# The wrapper finds lib/gfshim/ relative to itself, so the installed tree can be moved.
if(IS_ABSOLUTE "${CMAKE_INSTALL_BINDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(GFSHIM_FLAVOURS_DIR "${CMAKE_INSTALL_FULL_LIBDIR}/gfshim")
else()
  file(RELATIVE_PATH gfshim_bin_to_lib "/p/${CMAKE_INSTALL_BINDIR}" "/p/${CMAKE_INSTALL_LIBDIR}")
  set(GFSHIM_FLAVOURS_DIR "\$here/${gfshim_bin_to_lib}/gfshim")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/gfshim-info.sh.in
               ${CMAKE_BINARY_DIR}/generated/gfshim-info.sh @ONLY)
install(PROGRAMS ${CMAKE_BINARY_DIR}/generated/gfshim-info.sh DESTINATION ${CMAKE_INSTALL_BINDIR}
        RENAME gfshim-info COMPONENT common)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/tools/gfshimrun DESTINATION ${CMAKE_INSTALL_BINDIR}
        COMPONENT common)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT common)
# docs/ keeps its name, so the README's links to docs/... still resolve.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs DESTINATION ${CMAKE_INSTALL_DOCDIR} OPTIONAL
        COMPONENT common)

# ---- uninstall --------------------------------------------------------------------------------
add_custom_target(uninstall
  COMMAND ${CMAKE_COMMAND} -DGFSHIM_MANIFEST=${CMAKE_BINARY_DIR}/install_manifest.txt
          -DGFSHIM_OWN_LIB_DIR=${CMAKE_INSTALL_LIBDIR}/gfshim -DGFSHIM_OWN_DOC_DIR=${CMAKE_INSTALL_DOCDIR}
          -P ${PROJECT_SOURCE_DIR}/cmake/uninstall.cmake
  COMMENT "Removing the files of the last install (install_manifest.txt)"
  VERBATIM)

# ---- the Debian package: this flavour and the other one ---------------------------------------
# The other flavour's build directory: that of GFSHIM_OTHER_FLAVOUR_SHIM (scripts/build.sh sets
# it). Without it the package holds one flavour.
set(GFSHIM_OTHER_FLAVOUR_BUILD "")
if(GFSHIM_OTHER_FLAVOUR_SHIM)
  get_filename_component(GFSHIM_OTHER_FLAVOUR_BUILD "${GFSHIM_OTHER_FLAVOUR_SHIM}" DIRECTORY)
endif()
set(CPACK_INSTALL_CMAKE_PROJECTS "${CMAKE_BINARY_DIR};libgfshim;ALL;/")
if(GFSHIM_OTHER_FLAVOUR_BUILD)
  list(APPEND CPACK_INSTALL_CMAKE_PROJECTS "${GFSHIM_OTHER_FLAVOUR_BUILD};libgfshim;flavour;/")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME libgfshim)
set(CPACK_PACKAGE_VENDOR "libgfshim")
set(CPACK_PACKAGE_CONTACT "libgfshim maintainers <libgfshim@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "LD_PRELOAD PMPI shim that speeds up MPI_Allreduce (Open MPI and MPICH)")
set(CPACK_PACKAGE_DESCRIPTION
    "A drop-in PMPI shim that makes large MPI_Allreduce calls and bursts of MPI_Iallreduce of
existing MPI jobs faster without changing them: preload it (or launch with gfshimrun) and
eligible reductions run through the shim's pipelined ring or 2D-torus allreduce, nonblocking
ones fused into buckets; GPU buffers go through NCCL or host memory. One shim per MPI flavour,
in /usr/lib/gfshim/openmpi and /usr/lib/gfshim/mpich; gfshim-info shows what it would do.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES TRUE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.org/libgfshim")
# libgfshim.so and the plugin carry their C++ runtime (static) and dlopen hwloc, UCX, CUDA and
# NCCL; each shim and gfshim-info need their MPI's library, and only the one in use is needed.
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libc6 (>= 2.36), libstdc++6 (>= 12), libgcc-s1, libopenmpi3 | libmpich12")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libhwloc15, libucx0")
include(CPack)
