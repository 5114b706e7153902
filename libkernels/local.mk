# SPDX-License-Identifier: MIT
lib_LTLIBRARIES += libkernels/libnvfp4-kernels.la
nvfp4include_HEADERS += include/nvfp4/kernels.h
pkgconfig_DATA += pkgconfig/nvfp4-kernels.pc

libkernels_libnvfp4_kernels_la_SOURCES = \
	%reldir%/backend-impl.h \
	%reldir%/cpu-internal.h \
	%reldir%/cpu-exp16.h \
	%reldir%/cpu-exp8.h \
	%reldir%/cpu-lanes16.h \
	%reldir%/cpu-linear.h \
	%reldir%/registry.c \
	%reldir%/cpu.c \
	%reldir%/cpu-attn.c \
	%reldir%/cpu-linear.c \
	%reldir%/cpu-nvfp4.c \
	%reldir%/cpu-i8avx2.c \
	%reldir%/cpu-amx.c \
	%reldir%/cpu-dense.c \
	%reldir%/cpu-pool.c \
	%reldir%/comm-impl.h \
	%reldir%/comm.c
if HAVE_MPI
libkernels_libnvfp4_kernels_la_SOURCES += %reldir%/comm-mpi.c
endif
# GPU backend plugins are looked up in $(pkglibdir)/backends (backend-impl.h).
libkernels_libnvfp4_kernels_la_CPPFLAGS = $(AM_CPPFLAGS) $(NUMERICS_CPPFLAGS) \
	-DNVFP4_BACKEND_DIR='"$(pkglibdir)/backends"'
# -ffp-contract=off: the scalar code keeps the reference's float32 operation
# order (no silently fused multiply-add); SIMD kernels use explicit FMAs.
libkernels_libnvfp4_kernels_la_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS) $(JANSSON_CFLAGS) \
	$(MPI_CFLAGS) -ffp-contract=off
libkernels_libnvfp4_kernels_la_LIBADD = libquant/libnvfp4-quant.la \
	libformat/libnvfp4-format.la $(LIBM) $(DL_LIBS) $(PTHREAD_LIBS) $(MPI_LIBS)
libkernels_libnvfp4_kernels_la_LDFLAGS = $(OPENMP_CFLAGS) $(OPENMP_LDFLAGS) \
	-version-info $(NVFP4_KERNELS_LT_VERSION) -no-undefined \
	-Wl,--no-undefined \
	-Wl,--version-script=$(srcdir)/%reldir%/libnvfp4-kernels.sym
EXTRA_libkernels_libnvfp4_kernels_la_DEPENDENCIES = %reldir%/libnvfp4-kernels.sym
EXTRA_DIST += %reldir%/libnvfp4-kernels.sym
