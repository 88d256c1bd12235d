# libtorch comes from the PyPI torch wheel (see scripts/install-deps.sh), imported as `pkb::torch`.
#
# The wheel's include folder also carries its own copies of protobuf and fmt headers, which
# would shadow the system ones our other code uses; so the include path is a folder of links to
# every entry of the wheel's include folder but those.
#
# PKB_WITH_CUDA=OFF (CPU machines, CI): only the CPU half (libtorch_cpu + libc10), which needs
# nothing but the CUDA runtime that /usr/local/cuda has.
# PKB_WITH_CUDA=ON: also libtorch_cuda and libc10_cuda. Those need cuDNN and other libraries that
# only GPU nodes have (next to their torch), so the link allows them to be missing here; binaries
# built on a CPU machine then run on a GPU node whose torch is the same version.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c "import os, importlib.util as u; print(os.path.dirname(u.find_spec('torch').origin))"
  OUTPUT_VARIABLE PKB_TORCH_DIR OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _torch_rc)
if(NOT _torch_rc EQUAL 0 OR NOT EXISTS "${PKB_TORCH_DIR}/lib/libtorch_cpu.so")
  message(FATAL_ERROR "torch wheel not found by ${Python3_EXECUTABLE}; run scripts/install-deps.sh")
endif()
message(STATUS "libtorch from ${PKB_TORCH_DIR}")

set(PKB_TORCH_INCLUDE ${CMAKE_BINARY_DIR}/torch_include)
file(MAKE_DIRECTORY ${PKB_TORCH_INCLUDE})
file(GLOB _torch_include_entries RELATIVE ${PKB_TORCH_DIR}/include ${PKB_TORCH_DIR}/include/*)
foreach(_e ${_torch_include_entries})
  if(NOT _e MATCHES "^(google|fmt|pybind11)$" AND NOT EXISTS ${PKB_TORCH_INCLUDE}/${_e})
    file(CREATE_LINK ${PKB_TORCH_DIR}/include/${_e} ${PKB_TORCH_INCLUDE}/${_e} SYMBOLIC)
  endif()
endforeach()

find_path(PKB_CUDART_DIR libcudart.so.13 HINTS /usr/local/cuda/lib64 /usr/local/cuda/lib
          /usr/local/cuda/targets/x86_64-linux/lib)
find_path(PKB_CUPTI_DIR libcupti.so.13 HINTS /usr/local/cuda/lib /usr/local/cuda/lib64
          /usr/local/cuda/extras/CUPTI/lib64 /usr/local/cuda/targets/x86_64-linux/lib)

add_library(pkb_torch INTERFACE)
target_include_directories(pkb_torch SYSTEM INTERFACE
  ${PKB_TORCH_INCLUDE} ${PKB_TORCH_INCLUDE}/torch/csrc/api/include)
target_compile_definitions(pkb_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
target_link_libraries(pkb_torch INTERFACE
  ${PKB_TORCH_DIR}/lib/libtorch_cpu.so ${PKB_TORCH_DIR}/lib/libc10.so)
target_link_options(pkb_torch INTERFACE "LINKER:-rpath,${PKB_TORCH_DIR}/lib")
foreach(_d ${PKB_CUDART_DIR} ${PKB_CUPTI_DIR})
  target_link_options(pkb_torch INTERFACE "LINKER:-rpath-link,${_d}" "LINKER:-rpath,${_d}")
endforeach()
if(PKB_WITH_CUDA)
  target_link_libraries(pkb_torch INTERFACE
    ${PKB_TORCH_DIR}/lib/libtorch_cuda.so ${PKB_TORCH_DIR}/lib/libc10_cuda.so)
  target_link_options(pkb_torch INTERFACE "LINKER:--allow-shlib-undefined"
    "LINKER:--no-as-needed")
  target_compile_definitions(pkb_torch INTERFACE PKB_WITH_CUDA=1)
endif()
add_library(pkb::torch ALIAS pkb_torch)
