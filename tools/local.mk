# SPDX-License-Identifier: MIT
bin_PROGRAMS += tools/nvfp4
tools_nvfp4_SOURCES = \
	%reldir%/cli.h \
	%reldir%/nvfp4.c \
	%reldir%/cmd-inspect.c \
	%reldir%/cmd-dequant.c \
	%reldir%/cli-model.h \
	%reldir%/cli-model.c \
	%reldir%/cli-tokens.h \
	%reldir%/cli-tokens.c \
	%reldir%/cmd-generate.c \
	%reldir%/cmd-ppl.c \
	%reldir%/cmd-logits.c \
	%reldir%/cmd-tokenize.c \
	%reldir%/cmd-template.c \
	%reldir%/cmd-bench.c \
	%reldir%/cmd-synth.c
tools_nvfp4_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS) $(JANSSON_CFLAGS)
# The command calls all four layers, jansson (--json output), OpenMP (synth)
# and libm itself; tests/needed.test checks each NEEDED entry is used.
tools_nvfp4_LDFLAGS = $(AM_LDFLAGS) $(OPENMP_CFLAGS)
tools_nvfp4_LDADD = libmodel/libnvfp4-model.la libkernels/libnvfp4-kernels.la \
	libquant/libnvfp4-quant.la libformat/libnvfp4-format.la $(JANSSON_LIBS) $(LIBM)

if HAVE_MHD
tools_nvfp4_SOURCES += \
	%reldir%/cmd-serve.c \
	%reldir%/serve/serve.h \
	%reldir%/serve/http.c \
	%reldir%/serve/scheduler.c \
	%reldir%/serve/sample.c \
	%reldir%/serve/request.c \
	%reldir%/serve/metrics.c
tools_nvfp4_CFLAGS += $(MHD_CFLAGS)
tools_nvfp4_LDADD += $(MHD_LIBS) -lpthread
endif
