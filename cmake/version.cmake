# kcoral's version, from git tags (vX.Y.Z), the same in both Python distributions, the CMake
# package and the server's /health:
# - built by pip, scikit-build-core passes the version setuptools-scm read off the tags
#   (server/pyproject.toml): SKBUILD_PROJECT_VERSION (X.Y.Z) and _FULL (0.1.1.dev3+g1234abc);
# - otherwise `git describe` says it here, at configure time, in the same form;
# - without git or tags, 0.0.0.
# Sets KCORAL_VERSION (X.Y.Z, for project()) and KCORAL_VERSION_FULL.
if(DEFINED SKBUILD_PROJECT_VERSION)
  set(KCORAL_VERSION ${SKBUILD_PROJECT_VERSION})
  set(KCORAL_VERSION_FULL ${SKBUILD_PROJECT_VERSION_FULL})
  return()
endif()
set(KCORAL_VERSION 0.0.0)
set(KCORAL_VERSION_FULL 0.0.0)
find_program(KCORAL_GIT git)
if(KCORAL_GIT)
  execute_process(COMMAND ${KCORAL_GIT} describe --tags --long --match "v[0-9]*"
    WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} OUTPUT_VARIABLE described
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
  # vX.Y.Z-N-gHASH: X.Y.Z on the tag itself, else setuptools-scm's X.Y.(Z+1).devN+gHASH.
  if(NOT failed AND described MATCHES "^v([0-9]+)\\.([0-9]+)\\.([0-9]+)-([0-9]+)-(g[0-9a-f]+)$")
    set(KCORAL_VERSION "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}.${CMAKE_MATCH_3}")
    set(KCORAL_VERSION_FULL ${KCORAL_VERSION})
    if(NOT CMAKE_MATCH_4 EQUAL 0)
      math(EXPR next "${CMAKE_MATCH_3} + 1")
      set(KCORAL_VERSION "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}.${next}")
      set(KCORAL_VERSION_FULL "${KCORAL_VERSION}.dev${CMAKE_MATCH_4}+${CMAKE_MATCH_5}")
    endif()
  endif()
endif()
