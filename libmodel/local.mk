# SPDX-License-Identifier: MIT
lib_LTLIBRARIES += libmodel/libnvfp4-model.la
nvfp4include_HEADERS += include/nvfp4/model.h
pkgconfig_DATA += pkgconfig/nvfp4-model.pc

libmodel_libnvfp4_model_la_SOURCES = \
	%reldir%/internal.h \
	%reldir%/arch.c \
	%reldir%/model-internal.h \
	%reldir%/model.c \
	%reldir%/model-load.c \
	%reldir%/plan.c \
	%reldir%/context.c \
	%reldir%/parallel.h \
	%reldir%/parallel.c \
	%reldir%/kvcache.c \
	%reldir%/mla.c \
	%reldir%/eval.c \
	%reldir%/lse.h \
	%reldir%/validate.c \
	%reldir%/tokenizer-internal.h \
	%reldir%/tokenizer.c \
	%reldir%/tokenizer-split.c \
	%reldir%/chat-template-internal.h \
	%reldir%/chat-template.c \
	%reldir%/chat-template-lex.c \
	%reldir%/chat-template-parse.c \
	%reldir%/chat-template-value.c \
	%reldir%/chat-template-eval.c \
	%reldir%/chat-template-builtins.c \
	%reldir%/chat-template-methods.c
libmodel_libnvfp4_model_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(PCRE2_CFLAGS) \
	$(ICU_CFLAGS)
# ICU_UC_LIBS: $(ICU_LIBS) without libicudata, libicuuc's own dependency
# (icu-uc.pc lists both; configure.ac): linked directly it would be NEEDED
# for nothing.  $(AM_LDFLAGS) (--as-needed) is
# placed after the libraries by libtool, so it only drops what the compiler
# driver appends: libgomp for the -fopenmp libnvfp4-kernels.la passes on.
libmodel_libnvfp4_model_la_LIBADD = libkernels/libnvfp4-kernels.la \
	libquant/libnvfp4-quant.la libformat/libnvfp4-format.la \
	$(JANSSON_LIBS) $(PCRE2_LIBS) $(ICU_UC_LIBS) $(LIBM) $(PTHREAD_LIBS)
libmodel_libnvfp4_model_la_LDFLAGS = $(AM_LDFLAGS) \
	-version-info $(NVFP4_MODEL_LT_VERSION) -no-undefined \
	-Wl,--no-undefined \
	-Wl,--version-script=$(srcdir)/%reldir%/libnvfp4-model.sym
EXTRA_libmodel_libnvfp4_model_la_DEPENDENCIES = %reldir%/libnvfp4-model.sym
EXTRA_DIST += %reldir%/libnvfp4-model.sym
