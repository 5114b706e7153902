# SPDX-License-Identifier: MIT
# libFuzzer harnesses, one per input format (configure --enable-fuzzing with
# CC=clang; scripts/fuzz.sh builds them in build/fuzz and runs them on the
# committed seed corpora tests/fuzz/corpus/<harness>/ with tests/fuzz/nvfp4.dict).
# (automake puts the conditional programs' sources into the tarball itself)
EXTRA_DIST += %reldir%/nvfp4.dict %reldir%/corpus

if ENABLE_FUZZING
noinst_PROGRAMS += %reldir%/fuzz-safetensors %reldir%/fuzz-index %reldir%/fuzz-config \
	%reldir%/fuzz-qconfig %reldir%/fuzz-tokenizer %reldir%/fuzz-model-config \
	%reldir%/fuzz-model-header %reldir%/fuzz-template %reldir%/fuzz-request
FUZZ_CPPFLAGS = $(AM_CPPFLAGS) -DTEST_DATA_DIR='"$(abs_top_srcdir)/tests/data"'
FUZZ_ALL_CFLAGS = $(AM_CFLAGS) $(FUZZ_CFLAGS) $(JANSSON_CFLAGS)
FUZZ_LIBS = libmodel/libnvfp4-model.la libkernels/libnvfp4-kernels.la \
	libquant/libnvfp4-quant.la libformat/libnvfp4-format.la $(JANSSON_LIBS) $(LIBM)

tests_fuzz_fuzz_safetensors_SOURCES = %reldir%/fuzz-safetensors.c %reldir%/fuzzutil.h
tests_fuzz_fuzz_safetensors_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_safetensors_CFLAGS = $(FUZZ_ALL_CFLAGS)
tests_fuzz_fuzz_safetensors_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_index_SOURCES = %reldir%/fuzz-index.c %reldir%/fuzzutil.h
tests_fuzz_fuzz_index_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_index_CFLAGS = $(FUZZ_ALL_CFLAGS)
tests_fuzz_fuzz_index_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_config_SOURCES = %reldir%/fuzz-config.c %reldir%/fuzzutil.h
tests_fuzz_fuzz_config_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_config_CFLAGS = $(FUZZ_ALL_CFLAGS)
tests_fuzz_fuzz_config_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_qconfig_SOURCES = %reldir%/fuzz-qconfig.c %reldir%/fuzzutil.h
tests_fuzz_fuzz_qconfig_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_qconfig_CFLAGS = $(FUZZ_ALL_CFLAGS)
tests_fuzz_fuzz_qconfig_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_tokenizer_SOURCES = %reldir%/fuzz-tokenizer.c %reldir%/fuzzutil.h
tests_fuzz_fuzz_tokenizer_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_tokenizer_CFLAGS = $(FUZZ_ALL_CFLAGS)
tests_fuzz_fuzz_tokenizer_LDADD = $(FUZZ_LIBS) $(PCRE2_LIBS) $(ICU_LIBS)
tests_fuzz_fuzz_model_config_SOURCES = %reldir%/fuzz-model-config.c %reldir%/fuzzutil.h
tests_fuzz_fuzz_model_config_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_model_config_CFLAGS = $(FUZZ_ALL_CFLAGS)
tests_fuzz_fuzz_model_config_LDADD = $(FUZZ_LIBS) $(PCRE2_LIBS) $(ICU_LIBS)
tests_fuzz_fuzz_model_header_SOURCES = %reldir%/fuzz-model-header.c %reldir%/fuzzutil.h
tests_fuzz_fuzz_model_header_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_model_header_CFLAGS = $(FUZZ_ALL_CFLAGS)
tests_fuzz_fuzz_model_header_LDADD = $(FUZZ_LIBS) $(PCRE2_LIBS) $(ICU_LIBS)
# chat templates (libmodel) and the server's request parser (tools/serve)
tests_fuzz_fuzz_template_SOURCES = %reldir%/fuzz-template.c
tests_fuzz_fuzz_template_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_template_CFLAGS = $(FUZZ_ALL_CFLAGS)
tests_fuzz_fuzz_template_LDADD = $(FUZZ_LIBS) $(PCRE2_LIBS) $(ICU_LIBS)
tests_fuzz_fuzz_request_SOURCES = %reldir%/fuzz-request.c tools/serve/request.c tools/serve/serve.h
tests_fuzz_fuzz_request_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_request_CFLAGS = $(FUZZ_ALL_CFLAGS)
tests_fuzz_fuzz_request_LDADD = $(JANSSON_LIBS) $(LIBM)
endif
