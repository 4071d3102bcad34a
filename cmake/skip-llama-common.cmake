# Included by CMake right after llama.cpp's project() call when llama-cpp-python is built by the
# Makefile (-DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>).
#
# llama-cpp-python forces LLAMA_BUILD_COMMON on (a cache variable set with FORCE, so
# -DLLAMA_BUILD_COMMON=OFF cannot turn it off), and llama.cpp then compiles its `common` library
# and cpp-httplib for it: over 40% of the wheel's compile time. Nothing loads it: the bindings
# open libllama, libggml and (lazily, for multimodal chat handlers) libmtmd, none of which links
# llama-common; the wheel only shipped it as site-packages/lib/libllama-common.so. A normal
# variable set here, in llama.cpp's directory scope, shadows that cache entry for llama.cpp's
# `option()` and `if (LLAMA_BUILD_COMMON)` (policy CMP0077), so common, and its install rule, are
# left out. Should a later llama-cpp-python rename the project or the option, this does nothing and
# common is built again.
set(LLAMA_BUILD_COMMON OFF)
