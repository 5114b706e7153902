bin_PROGRAMS += tools/nvfp4
tools_nvfp4_SOURCES = \
	%reldir%/cli.h \
	%reldir%/nvfp4.c \
	%reldir%/cmd-inspect.c \
	%reldir%/cmd-dequant.c
tools_nvfp4_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tools_nvfp4_LDADD = libquant/libnvfp4-quant.la libformat/libnvfp4-format.la $(JANSSON_LIBS)
