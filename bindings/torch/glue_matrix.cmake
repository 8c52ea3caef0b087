# The compile matrix: the PyTorch glue prebuilt for each supported torch
# release (CACHEALLOC_GLUE_TORCH_VERSIONS), without installing any of them.
# Each is compiled against that release's headers only
# (scripts/torch_release.sh: torch/include from its wheel, cached) and
# linked against none of its libraries: the glue names torch's libraries
# (libc10.so, libtorch_cuda.so, ...) as needed by soname, and the dynamic
# loader binds those names to the copies the running torch already loaded
# (a loaded library is matched by its soname before any search). The CUDA
# runtime functions resolve through libc10_cuda.so's own dependency, so one
# glue serves torch's cu12 and cu13 builds of a release.
# Output: libcachealloc_torch-VERSION.so beside libcachealloc.so; the
# package loads the one matching the running torch (torch_glue.py).
# Needs: the CUDA headers (cmake/cuda_headers.cmake) and, the first time
# per version, network access for torch_release.sh (about 80 MB each).
# What cannot be had is skipped with a warning (a source install offline
# still works: install() compiles the glue then), or fails the build with
# CACHEALLOC_GLUE_MATRIX_REQUIRED=ON (CI: scripts/check_package.sh).
set(CACHEALLOC_GLUE_TORCH_VERSIONS "" CACHE STRING
    "torch releases to prebuild the glue for (e.g. 2.11.0;2.12.0), empty for none")
option(CACHEALLOC_GLUE_MATRIX_REQUIRED "Fail when a release's glue cannot be built" OFF)
if(CACHEALLOC_GLUE_MATRIX_REQUIRED)
  set(_matrix_problem FATAL_ERROR)
else()
  set(_matrix_problem WARNING)
endif()
if(NOT CACHEALLOC_GLUE_TORCH_VERSIONS)
  return()
endif()
if(NOT CACHEALLOC_CUDA_INCLUDE_FOUND)
  message(${_matrix_problem} "cachealloc: the glue matrix (${CACHEALLOC_GLUE_TORCH_VERSIONS}) needs "
                             "the CUDA headers, which were not found in: ${CACHEALLOC_CUDA_LOOKED}")
  return()
endif()

# Empty libraries that carry only torch's sonames, to be named as needed.
set(_stub_src ${CMAKE_CURRENT_BINARY_DIR}/torch_soname_stub.cc)
file(WRITE ${_stub_src} "// Only the soname matters (glue_matrix.cmake).\n")
set(_stubs)
foreach(_name c10 c10_cuda torch_cpu torch_cuda)
  add_library(cachealloc_soname_${_name} SHARED ${_stub_src})
  set_target_properties(cachealloc_soname_${_name} PROPERTIES
    OUTPUT_NAME ${_name}
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/torch_soname_stubs)
  list(APPEND _stubs cachealloc_soname_${_name})
endforeach()

# The interpreter that runs the build (scikit-build-core passes it; pip's
# own, with pip installed) downloads the headers, through pip and the
# user's pip configuration.
if(Python3_EXECUTABLE)
  set(_matrix_python ${Python3_EXECUTABLE})
elseif(Python_EXECUTABLE)
  set(_matrix_python ${Python_EXECUTABLE})
else()
  set(_matrix_python python3)
endif()
set(CACHEALLOC_GLUE_MATRIX_TARGETS "")
foreach(_version ${CACHEALLOC_GLUE_TORCH_VERSIONS})
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env CACHEALLOC_PYTHON=${_matrix_python}
            bash ${CACHEALLOC_ROOT}/scripts/torch_release.sh ${_version}
    OUTPUT_VARIABLE _release OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _status)
  if(_status EQUAL 3)
    # The user's pip configuration refuses this release (torch_release.sh
    # named the constraint above): skipped, whatever MATRIX_REQUIRED says.
    message(WARNING "cachealloc: torch ${_version} is refused by the pip configuration's "
                    "constraints (see above); no prebuilt glue for it")
    continue()
  endif()
  if(NOT _status EQUAL 0 OR NOT EXISTS "${_release}/torch/include/c10/cuda/CUDACachingAllocator.h")
    message(${_matrix_problem} "cachealloc: torch ${_version}'s headers could not be fetched "
                               "(scripts/torch_release.sh ${_version} exited ${_status}); no "
                               "prebuilt glue for it")
    continue()
  endif()
  set(_include ${_release}/torch/include)
  set(_target cachealloc_torch_${_version})
  string(REPLACE "." "_" _target ${_target})
  add_library(${_target} SHARED ${CACHEALLOC_GLUE_SOURCES})  # glue_files.cmake
  target_include_directories(${_target} SYSTEM PRIVATE
    ${_include} ${_include}/torch/csrc/api/include ${CACHEALLOC_CUDA_INCLUDE_FOUND})
  target_include_directories(${_target} PRIVATE ${CACHEALLOC_ROOT})
  # Wheels without CUDA (the macOS one read here) lack this generated header.
  if(NOT EXISTS "${_include}/c10/cuda/impl/cuda_cmake_macros.h")
    target_include_directories(${_target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cpu_wheel_shim)
  endif()
  # Every supported release's Linux wheels use the C++11 string ABI;
  # torch_glue.py checks torch._C._GLIBCXX_USE_CXX11_ABI before loading.
  target_compile_definitions(${_target} PRIVATE
    CACHEALLOC_TORCH_VERSION="${_version}" _GLIBCXX_USE_CXX11_ABI=1)
  target_link_libraries(${_target} PRIVATE ${_cachealloc_link} ${_stubs})
  target_link_options(${_target} PRIVATE "LINKER:--no-as-needed" "LINKER:--exclude-libs,ALL")
  set_target_properties(${_target} PROPERTIES
    OUTPUT_NAME cachealloc_torch-${_version}
    CXX_VISIBILITY_PRESET hidden
    BUILD_RPATH "$ORIGIN" INSTALL_RPATH "$ORIGIN")
  install(TARGETS ${_target} LIBRARY DESTINATION cachealloc COMPONENT python)
  list(APPEND CACHEALLOC_GLUE_MATRIX_TARGETS ${_target})
endforeach()
add_custom_target(glue_matrix DEPENDS ${CACHEALLOC_GLUE_MATRIX_TARGETS})
message(STATUS "cachealloc: compile matrix: the PyTorch glue for torch ${CACHEALLOC_GLUE_TORCH_VERSIONS}")
