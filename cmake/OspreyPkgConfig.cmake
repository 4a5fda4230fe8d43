# osprey_pkg_check_modules(PREFIX [REQUIRED] module...): pkg_check_modules(... IMPORTED_TARGET)
# whose PkgConfig::PREFIX target is identical on every configure.
#
# Why: CMake 3.25's FindPkgConfig moves `-isystem DIR` from a module's --cflags-only-other into
# PREFIX_INCLUDE_DIRS only in the configure that runs pkg-config (as normal variables shadowing
# the cache); later configures reuse the cache, which still has `-isystem;DIR` in
# PREFIX_CFLAGS_OTHER. So libzmq's `-isystem /usr/include/mit-krb5` (from krb5-gssapi) landed
# in INCLUDES after the first configure and in FLAGS after every other one, every compile line
# changed and ninja rebuilt everything. Here the target's properties are rewritten from its own
# values the same way each time: every `-isystem DIR` becomes an include directory (imported
# targets' include directories are -isystem already), other flags stay compile options.
include_guard(GLOBAL)
find_package(PkgConfig REQUIRED)

function(_osprey_pkg_normalize target)
  get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  get_target_property(opts ${target} INTERFACE_COMPILE_OPTIONS)
  if(NOT dirs)
    set(dirs "")
  endif()
  if(NOT opts)
    set(opts "")
  endif()
  set(other "")
  set(next_is_dir FALSE)
  foreach(opt IN LISTS opts)
    if(next_is_dir)
      list(APPEND dirs "${opt}")
      set(next_is_dir FALSE)
    elseif(opt STREQUAL "-isystem")
      set(next_is_dir TRUE)
    elseif(opt MATCHES "^-isystem(.+)$")
      list(APPEND dirs "${CMAKE_MATCH_1}")
    else()
      list(APPEND other "${opt}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  set_property(TARGET ${target} PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${dirs}")
  set_property(TARGET ${target} PROPERTY INTERFACE_COMPILE_OPTIONS "${other}")
endfunction()

macro(osprey_pkg_check_modules prefix)
  pkg_check_modules(${prefix} IMPORTED_TARGET ${ARGN})
  if(TARGET PkgConfig::${prefix})
    _osprey_pkg_normalize(PkgConfig::${prefix})
  endif()
endmacro()
