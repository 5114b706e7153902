# SPDX-License-Identifier: MIT
# GPU backends (house style: one kernel source for CUDA and HIP).  Each
# vendor builds libkernels/gpu/kernels.cu and libkernels/gpu/backend-gpu.cu into the loadable
# module nvfp4-backend-<vendor>.so in $(pkglibdir)/backends, which
# libnvfp4-kernels dlopen()s (libkernels/backend-impl.h); nothing else links
# a GPU runtime.
#
# libtool has no CUDA tag: the .cu files go through libtool --tag=CC with
# -prefer-non-pic (so libtool adds no bare -fPIC that nvcc would refuse) and
# the host flags spelled -Xcompiler=... for nvcc.  Contraction of
# multiply-adds is off on both compilers (--fmad=false, -ffp-contract=off):
# the kernels write every FMA they want as fmaf(), and §5 must stay bit-exact.

GPU_HDRS = \
	%reldir%/gpu.h \
	%reldir%/gpu-cuda.h \
	%reldir%/gpu-hip.h \
	%reldir%/comm-abi.h \
	libquant/numerics.h \
	%reldir%/kernels.h \
	libkernels/backend-impl.h
EXTRA_DIST += \
	%reldir%/gpu.h \
	%reldir%/comm-abi.h \
	%reldir%/gpu-cuda.h \
	%reldir%/gpu-hip.h \
	%reldir%/kernels.h \
	%reldir%/kernels.cu \
	%reldir%/backend-gpu.cu \
	%reldir%/comm-gpu.cu \
	%reldir%/bench-gpu.cu \
	%reldir%/nvfp4-backend.sym \
	%reldir%/gpu-emu.h \
	%reldir%/emu.cc

# The kernels' logic on the CPU: kernels.cu and backend-gpu.cu built against
# the emulator spelling libkernels/gpu/gpu-emu.h and run under tests/test-gpu, warps of
# 32 and 64 lanes (about a minute on two cores; SKIP without python3/g++).
if HAVE_CHECK
TESTS += tests/gpu-emu.test
EXTRA_DIST += tests/gpu-emu.test tests/nccl-emu.c
endif
GPU_EMU_OUT = %reldir%/emu/emu-kernels.cc
GPU_EMU_OUT += $(foreach w,32 64,$(addprefix %reldir%/emu/warp$(w)/,kernels.o backend.o \
	emu.o comm.o nvfp4-backend-cuda.so test-gpu.log test-gpu-model.log))
GPU_EMU_OUT += $(addprefix %reldir%/emu/,libnccl-emu.so libnccl-emu-old.so mpi.1 mpi.2 mpi.3 \
	mpi.4 mpi.x mpi.err \
	odd/like.json odd/l1 odd/l2 odd/m/config.json odd/m/model.safetensors)
CLEANFILES += $(GPU_EMU_OUT)

backendsdir = $(pkglibdir)/backends
backends_LTLIBRARIES =

GPU_CPPFLAGS = $(DEFS) $(DEFAULT_INCLUDES) $(AM_CPPFLAGS) -I$(top_srcdir)/%reldir% \
	$(NUMERICS_CPPFLAGS) $(CPPFLAGS)
GPU_MODULE_LDFLAGS = -module -avoid-version -shared -no-undefined -Wl,--no-undefined \
	-Wl,--version-script=$(srcdir)/%reldir%/nvfp4-backend.sym

if ENABLE_CUDA
NVCC_COMPILE = $(NVCC) -std=c++17 -DNVFP4_GPU_CUDA $(GPU_CPPFLAGS) -O3 --fmad=false \
	$(NVCC_ARCHFLAGS) -Xcompiler=-fPIC,-fvisibility=hidden,-Wall,-Wextra $(NVCCFLAGS)
LTNVCC = $(LIBTOOL) $(AM_V_lt) --tag=CC $(AM_LIBTOOLFLAGS) $(LIBTOOLFLAGS) \
	--mode=compile $(NVCC_COMPILE) -prefer-non-pic

%reldir%/cuda-kernels.lo: %reldir%/kernels.cu $(GPU_HDRS)
	@$(MKDIR_P) %reldir%
	$(AM_V_GEN)$(LTNVCC) -c -o $@ $(srcdir)/%reldir%/kernels.cu
%reldir%/cuda-backend.lo: %reldir%/backend-gpu.cu $(GPU_HDRS) config.h
	@$(MKDIR_P) %reldir%
	$(AM_V_GEN)$(LTNVCC) -c -o $@ $(srcdir)/%reldir%/backend-gpu.cu
%reldir%/cuda-comm.lo: %reldir%/comm-gpu.cu $(GPU_HDRS) config.h
	@$(MKDIR_P) %reldir%
	$(AM_V_GEN)$(LTNVCC) -c -o $@ $(srcdir)/%reldir%/comm-gpu.cu
%reldir%/cuda-bench.lo: %reldir%/bench-gpu.cu $(GPU_HDRS) config.h
	@$(MKDIR_P) %reldir%
	$(AM_V_GEN)$(LTNVCC) -c -o $@ $(srcdir)/%reldir%/bench-gpu.cu

backends_LTLIBRARIES += %reldir%/nvfp4-backend-cuda.la
%canon_reldir%_nvfp4_backend_cuda_la_SOURCES =
%canon_reldir%_nvfp4_backend_cuda_la_LIBADD = %reldir%/cuda-backend.lo \
	%reldir%/cuda-comm.lo \
	%reldir%/cuda-kernels.lo libquant/libnvfp4-quant.la libformat/libnvfp4-format.la \
	$(CUDA_LIBS) $(DL_LIBS) $(PTHREAD_LIBS)
%canon_reldir%_nvfp4_backend_cuda_la_LDFLAGS = $(GPU_MODULE_LDFLAGS)
EXTRA_%canon_reldir%_nvfp4_backend_cuda_la_DEPENDENCIES = %reldir%/nvfp4-backend.sym

# GPU benchmarks (scripts/gpu-check.sh): the launchers directly, timed with
# device events; cuBLAS is linked here only.
noinst_PROGRAMS += %reldir%/bench-gpu-cuda
%canon_reldir%_bench_gpu_cuda_SOURCES =
%canon_reldir%_bench_gpu_cuda_LDADD = %reldir%/cuda-bench.lo %reldir%/cuda-kernels.lo \
	$(CUDA_LIBS) $(CUBLAS_LIBS) $(LIBM)
CLEANFILES += %reldir%/cuda-kernels.lo %reldir%/cuda-backend.lo %reldir%/cuda-bench.lo \
	%reldir%/cuda-comm.lo
endif

if ENABLE_HIP
HIPCC_COMPILE = $(HIPCC) -x hip -std=c++17 -DNVFP4_GPU_HIP $(GPU_CPPFLAGS) -O3 \
	-ffp-contract=off $(HIP_ARCHFLAGS) -fPIC -fvisibility=hidden -Wall -Wextra $(HIPCCFLAGS)
LTHIPCC = $(LIBTOOL) $(AM_V_lt) --tag=CC $(AM_LIBTOOLFLAGS) $(LIBTOOLFLAGS) \
	--mode=compile $(HIPCC_COMPILE) -prefer-non-pic

%reldir%/hip-kernels.lo: %reldir%/kernels.cu $(GPU_HDRS)
	@$(MKDIR_P) %reldir%
	$(AM_V_GEN)$(LTHIPCC) -c -o $@ $(srcdir)/%reldir%/kernels.cu
%reldir%/hip-backend.lo: %reldir%/backend-gpu.cu $(GPU_HDRS) config.h
	@$(MKDIR_P) %reldir%
	$(AM_V_GEN)$(LTHIPCC) -c -o $@ $(srcdir)/%reldir%/backend-gpu.cu
%reldir%/hip-comm.lo: %reldir%/comm-gpu.cu $(GPU_HDRS) config.h
	@$(MKDIR_P) %reldir%
	$(AM_V_GEN)$(LTHIPCC) -c -o $@ $(srcdir)/%reldir%/comm-gpu.cu
%reldir%/hip-bench.lo: %reldir%/bench-gpu.cu $(GPU_HDRS) config.h
	@$(MKDIR_P) %reldir%
	$(AM_V_GEN)$(LTHIPCC) -c -o $@ $(srcdir)/%reldir%/bench-gpu.cu

backends_LTLIBRARIES += %reldir%/nvfp4-backend-hip.la
%canon_reldir%_nvfp4_backend_hip_la_SOURCES =
%canon_reldir%_nvfp4_backend_hip_la_LIBADD = %reldir%/hip-backend.lo \
	%reldir%/hip-comm.lo \
	%reldir%/hip-kernels.lo libquant/libnvfp4-quant.la libformat/libnvfp4-format.la \
	$(HIP_LIBS) $(DL_LIBS) $(PTHREAD_LIBS)
%canon_reldir%_nvfp4_backend_hip_la_LDFLAGS = $(GPU_MODULE_LDFLAGS)
EXTRA_%canon_reldir%_nvfp4_backend_hip_la_DEPENDENCIES = %reldir%/nvfp4-backend.sym

noinst_PROGRAMS += %reldir%/bench-gpu-hip
%canon_reldir%_bench_gpu_hip_SOURCES =
%canon_reldir%_bench_gpu_hip_LDADD = %reldir%/hip-bench.lo %reldir%/hip-kernels.lo \
	$(HIP_LIBS) $(LIBM)
CLEANFILES += %reldir%/hip-kernels.lo %reldir%/hip-backend.lo %reldir%/hip-bench.lo \
	%reldir%/hip-comm.lo
endif
