# SPDX-License-Identifier: MIT
lib_LTLIBRARIES += libquant/libnvfp4-quant.la
nvfp4include_HEADERS += include/nvfp4/quant.h
pkgconfig_DATA += pkgconfig/nvfp4-quant.pc

libquant_libnvfp4_quant_la_SOURCES = \
	%reldir%/internal.h \
	%reldir%/numerics.h \
	%reldir%/codec.c \
	%reldir%/nvfp4.c \
	%reldir%/qconfig.c \
	%reldir%/dialect.c \
	%reldir%/linear.c
# -ffp-contract=off: the bit-exact formulas of §2/§5/§7 must not be fused
# into multiply-adds when someone builds with -march=native.
libquant_libnvfp4_quant_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(PCRE2_CFLAGS) $(OPENMP_CFLAGS) \
	-ffp-contract=off
libquant_libnvfp4_quant_la_LIBADD = libformat/libnvfp4-format.la $(JANSSON_LIBS) $(PCRE2_LIBS) $(LIBM)
libquant_libnvfp4_quant_la_LDFLAGS = \
	-version-info $(NVFP4_QUANT_LT_VERSION) -no-undefined \
	-Wl,--no-undefined $(OPENMP_CFLAGS) $(OPENMP_LDFLAGS) \
	-Wl,--version-script=$(srcdir)/%reldir%/libnvfp4-quant.sym
EXTRA_libquant_libnvfp4_quant_la_DEPENDENCIES = %reldir%/libnvfp4-quant.sym
EXTRA_DIST += %reldir%/libnvfp4-quant.sym
