# SPDX-License-Identifier: MIT
# nvfp4-gpu.m4 - configure switches for the GPU backend modules.
#
# NVFP4_GPU: --enable-cuda / --enable-hip (both off by default),
# --with-cuda-arch / --with-hip-arch.  Sets the AM_CONDITIONALs ENABLE_CUDA
# and ENABLE_HIP and substitutes NVCC, NVCC_ARCHFLAGS, CUDA_LIBS, CUBLAS_LIBS,
# HIPCC, HIP_ARCHFLAGS, HIP_LIBS.  libtool has no CUDA tag: libkernels/gpu/local.mk
# compiles the .cu files through libtool --tag=CC itself.
AC_DEFUN([NVFP4_GPU], [
AC_ARG_ENABLE([cuda],
  [AS_HELP_STRING([--enable-cuda], [build the CUDA backend module (default: no)])],
  [], [enable_cuda=no])
AC_ARG_ENABLE([hip],
  [AS_HELP_STRING([--enable-hip], [build the HIP (ROCm) backend module (default: no)])],
  [], [enable_hip=no])
AC_ARG_WITH([cuda-arch],
  [AS_HELP_STRING([--with-cuda-arch=LIST],
    [comma-separated CUDA targets, e.g. sm_80,sm_90 (default: sm_80,sm_90, plus sm_100a and sm_120a when nvcc offers them)])],
  [], [with_cuda_arch=default])
AC_ARG_WITH([hip-arch],
  [AS_HELP_STRING([--with-hip-arch=LIST],
    [comma-separated AMD GPU targets (default: gfx90a,gfx940)])],
  [], [with_hip_arch=gfx90a,gfx940])
AC_ARG_VAR([NVCC], [CUDA compiler (--enable-cuda)])
AC_ARG_VAR([NVCCFLAGS], [extra flags for NVCC])
AC_ARG_VAR([CUDA_LIBDIR], [directory holding libcudart.so])
AC_ARG_VAR([HIPCC], [HIP compiler (--enable-hip)])
AC_ARG_VAR([HIPCCFLAGS], [extra flags for HIPCC])

NVCC_ARCHFLAGS=
CUDA_LIBS=
CUBLAS_LIBS=
AS_IF([test "x$enable_cuda" = xyes], [
  AC_PATH_PROG([NVCC], [nvcc], [no], [$PATH$PATH_SEPARATOR/usr/local/cuda/bin])
  AS_IF([test "x$NVCC" = xno],
        [AC_MSG_ERROR([--enable-cuda needs nvcc from the CUDA toolkit (on PATH, or NVCC=...)])])
  AS_IF([test "x$CUDA_LIBDIR" = x], [
    nvfp4_cuda_home=`AS_DIRNAME(["$NVCC"])`
    nvfp4_cuda_home=`AS_DIRNAME(["$nvfp4_cuda_home"])`
    for d in "$nvfp4_cuda_home/lib64" "$nvfp4_cuda_home/targets/x86_64-linux/lib" \
             "$nvfp4_cuda_home/lib" /usr/lib/x86_64-linux-gnu; do
      AS_IF([test -z "$CUDA_LIBDIR" && test -e "$d/libcudart.so"], [CUDA_LIBDIR=$d])
    done])
  AS_IF([test "x$CUDA_LIBDIR" = x],
        [AC_MSG_ERROR([libcudart.so not found next to $NVCC; set CUDA_LIBDIR])])
  cat > conftest.cu <<_NVFP4_EOF
__global__ void k(float *p) { p[[threadIdx.x]] = 1.0f; }
_NVFP4_EOF
  AS_IF([test "x$with_cuda_arch" = xdefault], [
    with_cuda_arch=sm_80,sm_90
    AC_MSG_CHECKING([whether $NVCC can build sm_100a])
    AS_IF([$NVCC -c -gencode arch=compute_100a,code=sm_100a conftest.cu -o conftest.$OBJEXT \
             >&AS_MESSAGE_LOG_FD 2>&1],
          [with_cuda_arch=$with_cuda_arch,sm_100a; AC_MSG_RESULT([yes])],
          [AC_MSG_RESULT([no])])
    # consumer Blackwell: the only targets whose mma.sync has block-scaled
    # FP4 (libkernels/gpu/kernels.cu's W4A4 FP4 GEMM)
    AC_MSG_CHECKING([whether $NVCC can build sm_120a])
    AS_IF([$NVCC -c -gencode arch=compute_120a,code=sm_120a conftest.cu -o conftest.$OBJEXT \
             >&AS_MESSAGE_LOG_FD 2>&1],
          [with_cuda_arch=$with_cuda_arch,sm_120a; AC_MSG_RESULT([yes])],
          [AC_MSG_RESULT([no])])])
  # One cubin per target, plus PTX of the newest portable one so that later
  # GPUs can JIT it ("a" targets are not forward-compatible).
  nvfp4_ptx=
  for a in `echo "$with_cuda_arch" | tr ',' ' '`; do
    sm=`echo "$a" | sed 's/^sm_//; s/^compute_//'`
    NVCC_ARCHFLAGS="$NVCC_ARCHFLAGS -gencode arch=compute_$sm,code=sm_$sm"
    case $sm in *a) ;; *) nvfp4_ptx=$sm ;; esac
  done
  AS_IF([test -n "$nvfp4_ptx"],
        [NVCC_ARCHFLAGS="$NVCC_ARCHFLAGS -gencode arch=compute_$nvfp4_ptx,code=compute_$nvfp4_ptx"])
  AC_MSG_CHECKING([whether $NVCC works with$NVCC_ARCHFLAGS])
  AS_IF([$NVCC -c $NVCC_ARCHFLAGS conftest.cu -o conftest.$OBJEXT >&AS_MESSAGE_LOG_FD 2>&1],
        [AC_MSG_RESULT([yes])],
        [AC_MSG_RESULT([no]); AC_MSG_ERROR([$NVCC cannot build for $with_cuda_arch (see config.log)])])
  # The plug-in's device communicator (libkernels/gpu/comm-gpu.cu) dlopen()s
  # libnccl.so.2 and calls it through our own declaration of NCCL's ABI
  # (libkernels/gpu/comm-abi.h), so it is always built.  Where NCCL's header
  # (2.14 or later: non-blocking init) is present, HAVE_NCCL_H makes
  # comm-gpu.cu check our declarations against it at compile time.
  cat > conftest.cu <<_NVFP4_EOF
#include <nccl.h>
#if NCCL_VERSION_CODE < 21400
#error NCCL before 2.14
#endif
int nvfp4_nccl_major = NCCL_MAJOR;
_NVFP4_EOF
  AC_MSG_CHECKING([whether $NVCC finds nccl.h of NCCL 2.14 or later (to check comm-abi.h)])
  AS_IF([$NVCC -c conftest.cu -o conftest.$OBJEXT >&AS_MESSAGE_LOG_FD 2>&1],
        [AC_MSG_RESULT([yes])
         AC_DEFINE([HAVE_NCCL_H], [1],
                   [Define to 1 to check libkernels/gpu/comm-abi.h against nccl.h.])],
        [AC_MSG_RESULT([no (the NCCL ABI declarations go unchecked)])])
  rm -f conftest.cu conftest.$OBJEXT
  # Shared runtime, found at run time by the dynamic loader (ldconfig, as the
  # CUDA packages set it up, or LD_LIBRARY_PATH): no RPATH in an installed
  # plug-in (Debian policy; tests/needed.test).  nvcc's host objects need the
  # C++ runtime.
  CUDA_LIBS="-L$CUDA_LIBDIR -lcudart -lstdc++"
  CUBLAS_LIBS="-lcublas"
])

HIP_ARCHFLAGS=
HIP_LIBS=
AS_IF([test "x$enable_hip" = xyes], [
  AC_PATH_PROG([HIPCC], [hipcc], [no], [$PATH$PATH_SEPARATOR/opt/rocm/bin])
  AS_IF([test "x$HIPCC" = xno],
        [AC_MSG_ERROR([--enable-hip needs hipcc (Debian: apt install hipcc libamdhip64-dev; or HIPCC=...)])])
  for a in `echo "$with_hip_arch" | tr ',' ' '`; do
    HIP_ARCHFLAGS="$HIP_ARCHFLAGS --offload-arch=$a"
  done
  cat > conftest.cu <<_NVFP4_EOF
#include <hip/hip_runtime.h>
__global__ void k(float *p) { p[[threadIdx.x]] = 1.0f; }
_NVFP4_EOF
  AC_MSG_CHECKING([whether $HIPCC works with$HIP_ARCHFLAGS])
  AS_IF([$HIPCC -x hip -c $HIP_ARCHFLAGS conftest.cu -o conftest.$OBJEXT >&AS_MESSAGE_LOG_FD 2>&1],
        [AC_MSG_RESULT([yes])],
        [AC_MSG_RESULT([no]); AC_MSG_ERROR([$HIPCC cannot build for $with_hip_arch (see config.log)])])
  # As for NCCL: the RCCL communicator (librccl.so.1, dlopen()ed) is always
  # built; RCCL's header (ROCm's rccl package, Debian's librccl-dev where the
  # release has it), when present, checks libkernels/gpu/comm-abi.h.
  cat > conftest.cu <<_NVFP4_EOF
#include <rccl/rccl.h>
#if NCCL_VERSION_CODE < 21400
#error RCCL before 2.14
#endif
int nvfp4_rccl_major = NCCL_MAJOR;
_NVFP4_EOF
  AC_MSG_CHECKING([whether $HIPCC finds rccl/rccl.h of RCCL 2.14 or later (to check comm-abi.h)])
  AS_IF([$HIPCC -x hip -c conftest.cu -o conftest.$OBJEXT >&AS_MESSAGE_LOG_FD 2>&1],
        [AC_MSG_RESULT([yes])
         AC_DEFINE([HAVE_RCCL_H], [1],
                   [Define to 1 to check libkernels/gpu/comm-abi.h against rccl/rccl.h.])],
        [AC_MSG_RESULT([no (the RCCL ABI declarations go unchecked)])])
  rm -f conftest.cu conftest.$OBJEXT
  nvfp4_save_LIBS=$LIBS
  nvfp4_hip_libdir=
  for d in /opt/rocm/lib /opt/rocm/lib64; do
    AS_IF([test -z "$nvfp4_hip_libdir" && test -e "$d/libamdhip64.so"], [nvfp4_hip_libdir=$d])
  done
  AS_IF([test -n "$nvfp4_hip_libdir"],
        [HIP_LIBS="-L$nvfp4_hip_libdir"])  # no RPATH: as CUDA_LIBS
  LIBS="$HIP_LIBS $LIBS"
  AC_CHECK_LIB([amdhip64], [hipGetDeviceCount], [],
               [AC_MSG_ERROR([libamdhip64 not found (Debian: libamdhip64-dev)])])
  LIBS=$nvfp4_save_LIBS
  HIP_LIBS="$HIP_LIBS -lamdhip64 -lstdc++"
])

AM_CONDITIONAL([ENABLE_CUDA], [test "x$enable_cuda" = xyes])
AM_CONDITIONAL([ENABLE_HIP], [test "x$enable_hip" = xyes])
AC_SUBST([NVCC_ARCHFLAGS])
AC_SUBST([CUDA_LIBS])
AC_SUBST([CUBLAS_LIBS])
AC_SUBST([HIP_ARCHFLAGS])
AC_SUBST([HIP_LIBS])
])
