# SPDX-License-Identifier: MIT
lib_LTLIBRARIES += libformat/libnvfp4-format.la
nvfp4include_HEADERS += include/nvfp4/format.h
pkgconfig_DATA += pkgconfig/nvfp4-format.pc

libformat_libnvfp4_format_la_SOURCES = \
	%reldir%/internal.h \
	%reldir%/error.c \
	%reldir%/dtype.c \
	%reldir%/util.c \
	%reldir%/safetensors.c \
	%reldir%/writer.c \
	%reldir%/config.c \
	%reldir%/checkpoint.c
libformat_libnvfp4_format_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
libformat_libnvfp4_format_la_LIBADD = $(JANSSON_LIBS)
libformat_libnvfp4_format_la_LDFLAGS = \
	-version-info $(NVFP4_FORMAT_LT_VERSION) -no-undefined \
	-Wl,--no-undefined \
	-Wl,--version-script=$(srcdir)/%reldir%/libnvfp4-format.sym
EXTRA_libformat_libnvfp4_format_la_DEPENDENCIES = %reldir%/libnvfp4-format.sym
EXTRA_DIST += %reldir%/libnvfp4-format.sym
