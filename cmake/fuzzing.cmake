# The fuzz build's flags (KCORAL_FUZZ): every target, libkcoral's core included, carries
# libFuzzer's coverage instrumentation (fuzzer-no-link; the fuzz targets add the fuzzer's
# main themselves) and AddressSanitizer and UndefinedBehaviorSanitizer. A UBSan report
# aborts rather than goes on, so to the fuzzer it is a crash like any memory error.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "KCORAL_FUZZ needs clang and its libFuzzer: -DCMAKE_CXX_COMPILER=clang++-19 "
                      "(scripts/fuzz.sh installs Debian's clang-19 and libclang-rt-19-dev)")
endif()
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE RelWithDebInfo)  # optimized for speed, with line numbers in reports
endif()
add_compile_options(-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=all
                    -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
