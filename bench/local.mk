# SPDX-License-Identifier: MIT
# Benchmarks: built with the tree, never run by `make check` (timings on a
# shared machine are not tests).
noinst_PROGRAMS += bench/bench-dequant
bench_bench_dequant_SOURCES = %reldir%/bench-dequant.c
bench_bench_dequant_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(OPENMP_CFLAGS)
bench_bench_dequant_LDFLAGS = $(AM_LDFLAGS) $(OPENMP_CFLAGS)
bench_bench_dequant_LDADD = libquant/libnvfp4-quant.la libformat/libnvfp4-format.la

# OpenBLAS, the GEMM reference, is dlopen'ed at run time: nothing links it.
noinst_PROGRAMS += bench/bench-kernels
bench_bench_kernels_SOURCES = %reldir%/bench-kernels.c
bench_bench_kernels_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(OPENMP_CFLAGS)
bench_bench_kernels_LDFLAGS = $(AM_LDFLAGS) $(OPENMP_CFLAGS)
bench_bench_kernels_LDADD = libkernels/libnvfp4-kernels.la libquant/libnvfp4-quant.la \
	libformat/libnvfp4-format.la $(LIBM) $(DL_LIBS)
