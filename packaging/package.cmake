# Installation layout and the Debian package (CPack DEB): binaries, man pages, systemd units,
# sysusers/tmpfiles snippets and the default configuration. Included from the top-level
# CMakeLists.txt. Build the package with: cmake --build B && (cd B && cpack -G DEB).

# Where system integration files go. Absolute by default (Debian's paths); override for staging.
set(TANDEM_SYSTEMD_UNIT_DIR "/lib/systemd/system" CACHE PATH "systemd unit directory")
set(TANDEM_SYSUSERS_DIR "/usr/lib/sysusers.d" CACHE PATH "sysusers.d directory")
set(TANDEM_TMPFILES_DIR "/usr/lib/tmpfiles.d" CACHE PATH "tmpfiles.d directory")
set(TANDEM_CONFIG_DIR "/etc/tandem" CACHE PATH "Directory of tandemd.toml")
option(TANDEM_DEB_SHLIBDEPS "Compute the package's library dependencies with dpkg-shlibdeps" ON)

set(_pkg ${CMAKE_CURRENT_LIST_DIR})
install(FILES ${_pkg}/tandemd.service ${_pkg}/tandemd.socket ${_pkg}/tandem-http.service ${_pkg}/tandem-http.socket
        DESTINATION ${TANDEM_SYSTEMD_UNIT_DIR})
install(FILES ${_pkg}/tandem-http-socket-only.conf DESTINATION share/doc/tandem/examples)
install(FILES ${_pkg}/tandem.sysusers.conf DESTINATION ${TANDEM_SYSUSERS_DIR} RENAME tandem.conf)
install(FILES ${_pkg}/tandem.tmpfiles.conf DESTINATION ${TANDEM_TMPFILES_DIR} RENAME tandem.conf)
install(FILES ${_pkg}/tandemd.toml DESTINATION ${TANDEM_CONFIG_DIR})

# Man pages, gzipped in the staging tree as Debian wants (gzip -n: no timestamp, reproducible).
file(GLOB _man_pages CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/man/*.[1-8])
foreach(page ${_man_pages})
  get_filename_component(_name ${page} NAME)
  string(REGEX REPLACE ".*\\.([1-8])$" "\\1" _section ${_name})
  install(FILES ${page} DESTINATION share/man/man${_section})
  install(CODE "execute_process(COMMAND gzip -9nf \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/share/man/man${_section}/${_name}\" RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR \"gzip of man page ${_name} failed\")
    endif()")
endforeach()

install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION share/doc/tandem OPTIONAL)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION share/doc/tandem FILES_MATCHING PATTERN "*.md")

set(CPACK_PACKAGE_NAME tandem)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "LLM inference daemon for GGUF models on NVIDIA GPUs")
set(CPACK_PACKAGE_CONTACT "tandem maintainers <tandem@localhost>" CACHE STRING "Debian Maintainer field")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# CPack puts the summary first and indents these lines itself.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "tandemd keeps GGUF language models resident on one or more GPUs and serves
local clients over a Unix socket (tandem-protocol(7)); models can be loaded,
unloaded and hot-swapped while it serves. tandem is its command-line client,
tandem-model an offline tool to inspect, make and quantize GGUF files,
tandem-http an OpenAI-compatible HTTP front (a separate, sandboxed service).")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd")
# dpkg-shlibdeps finds no shlibs entries for NVIDIA's libraries and leaves them out: name the
# CUDA runtime, cuBLAS and (when linked) NCCL the binaries need, as NVIDIA's repository or
# Debian's non-free archive packages them.
if(TANDEM_HAVE_CUDA)
  set(_cu "${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
  set(_deps "cuda-cudart-${_cu} | libcudart${CUDAToolkit_VERSION_MAJOR}"
            "libcublas-${_cu} | libcublas${CUDAToolkit_VERSION_MAJOR}")
  if(TANDEM_HAVE_NCCL)
    list(APPEND _deps "libnccl2")
  endif()
  string(JOIN ", " CPACK_DEBIAN_PACKAGE_DEPENDS ${_deps})
endif()
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ${TANDEM_DEB_SHLIBDEPS})
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)
# conffiles: dpkg keeps local edits of the configuration across upgrades.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${_pkg}/debian/conffiles ${_pkg}/debian/postinst ${_pkg}/debian/prerm ${_pkg}/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)  # debug symbols are not shipped
include(CPack)
