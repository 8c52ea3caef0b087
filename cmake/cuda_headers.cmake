# Finds the CUDA headers the CUDA backends compile against
# (cuda_runtime_api.h and cuda.h). Only headers: libcachealloc.so links no
# CUDA library (bindings/cuda/cuda_runtime_loader.h), so a machine with
# torch's nvidia-* wheels and no CUDA toolkit builds the backends too.
# Looked for, in order: -DCACHEALLOC_CUDA_INCLUDE=DIR, a toolkit
# ($CUDA_HOME, $CUDA_PATH, CMake's CUDAToolkit, /usr/local/cuda), the
# nvidia-* wheels beside the building Python (nvidia/cu13/include for CUDA
# 13, nvidia/cuda_runtime/include for 12; an isolated pip build still
# reports the target environment's site-packages through sysconfig).
# Sets CACHEALLOC_CUDA_INCLUDE_FOUND (the folder(s) to include; empty when
# either header is missing) and, for messages, CACHEALLOC_CUDA_LOOKED.
set(CACHEALLOC_CUDA_INCLUDE "" CACHE PATH "Folder holding cuda_runtime_api.h and cuda.h")
set(_candidates ${CACHEALLOC_CUDA_INCLUDE})
foreach(_var CUDA_HOME CUDA_PATH)
  if(DEFINED ENV{${_var}})
    list(APPEND _candidates "$ENV{${_var}}/include")
  endif()
endforeach()
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  list(APPEND _candidates ${CUDAToolkit_INCLUDE_DIRS})
endif()
list(APPEND _candidates /usr/local/cuda/include)
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_FOUND)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import sysconfig; print(';'.join(sorted({sysconfig.get_paths()[k] for k in ('purelib', 'platlib')})))"
    OUTPUT_VARIABLE _sites OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  foreach(_site ${_sites})
    # CUDA 13's wheels first: one folder holds the runtime's and driver's
    # headers; CUDA 12's spread them over nvidia/*/include.
    file(GLOB _wheel_includes LIST_DIRECTORIES true "${_site}/nvidia/*/include")
    list(APPEND _candidates "${_site}/nvidia/cu13/include" "${_site}/nvidia/cuda_runtime/include"
         ${_wheel_includes})
  endforeach()
endif()
set(CACHEALLOC_CUDA_LOOKED "${_candidates}")
# The first folder with the runtime's header, and the first with the
# driver's (the same one for a toolkit); the list of both when they differ.
set(CACHEALLOC_CUDA_INCLUDE_FOUND "")
foreach(_header cuda_runtime_api.h cuda.h)
  set(_found "")
  foreach(_dir ${_candidates})
    if(EXISTS "${_dir}/${_header}")
      set(_found "${_dir}")
      break()
    endif()
  endforeach()
  if(NOT _found)
    set(CACHEALLOC_CUDA_INCLUDE_FOUND "")
    break()
  endif()
  list(APPEND CACHEALLOC_CUDA_INCLUDE_FOUND "${_found}")
endforeach()
list(REMOVE_DUPLICATES CACHEALLOC_CUDA_INCLUDE_FOUND)
