# SPDX-License-Identifier: MIT
# Check-based tests, one program per layer, plus shell tests of the tool.
TEST_CPPFLAGS = $(AM_CPPFLAGS) -DTEST_DATA_DIR='"$(abs_top_srcdir)/tests/data"' \
	-DNVFP4_TOOL='"$(abs_top_builddir)/tools/nvfp4"'
AM_TESTS_ENVIRONMENT = top_srcdir='$(top_srcdir)' top_builddir='$(top_builddir)' \
	NM='$(NM)' READELF='$(READELF)' nvfp4_libdir='$(libdir)'; \
	export top_srcdir top_builddir NM READELF nvfp4_libdir;
EXTRA_DIST += tests/data

# Link hygiene, no Check needed: the exports of each .so = the NVFP4_API
# functions of its header = the names of its version script; the globals of
# each static archive are public names or the layer's reserved prefix.
TESTS += tests/exports.test tests/archive-symbols.test tests/needed.test
EXTRA_DIST += tests/exports.test tests/archive-symbols.test tests/api-names.sh \
	tests/needed.test
# A GPU plug-in that fails to load: the error shows dlerror()'s text.
TESTS += tests/backend-load.test
EXTRA_DIST += tests/backend-load.test
# The command on wrong input: option ranges, non-safetensors files, SIGINT.
TESTS += tests/cli-manners.test
EXTRA_DIST += tests/cli-manners.test

# Tensor parallelism under mpirun (SKIPs without MPI).
TESTS += tests/mpi.test
EXTRA_DIST += tests/mpi.test

if HAVE_CHECK
check_PROGRAMS += tests/test-format
tests_test_format_SOURCES = %reldir%/test-format.c %reldir%/testutil.h %reldir%/sha256.h %reldir%/toolrun.h
tests_test_format_CPPFLAGS = $(TEST_CPPFLAGS)
tests_test_format_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
tests_test_format_LDADD = libformat/libnvfp4-format.la $(CHECK_LIBS) $(JANSSON_LIBS)
TESTS += tests/test-format

check_PROGRAMS += tests/test-quant
tests_test_quant_SOURCES = %reldir%/test-quant.c %reldir%/testutil.h %reldir%/toolrun.h
tests_test_quant_CPPFLAGS = $(TEST_CPPFLAGS)
tests_test_quant_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
tests_test_quant_LDADD = libquant/libnvfp4-quant.la libformat/libnvfp4-format.la \
	$(CHECK_LIBS) $(JANSSON_LIBS)
TESTS += tests/test-quant

check_PROGRAMS += tests/test-tokenizer
tests_test_tokenizer_SOURCES = %reldir%/test-tokenizer.c %reldir%/testutil.h
tests_test_tokenizer_CPPFLAGS = $(TEST_CPPFLAGS)
tests_test_tokenizer_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
tests_test_tokenizer_LDADD = libmodel/libnvfp4-model.la libkernels/libnvfp4-kernels.la \
	libquant/libnvfp4-quant.la libformat/libnvfp4-format.la $(CHECK_LIBS) $(JANSSON_LIBS)
TESTS += tests/test-tokenizer

check_PROGRAMS += tests/test-template
tests_test_template_SOURCES = %reldir%/test-template.c %reldir%/testutil.h
tests_test_template_CPPFLAGS = $(TEST_CPPFLAGS)
tests_test_template_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS) -pthread
tests_test_template_LDFLAGS = -pthread
tests_test_template_LDADD = libmodel/libnvfp4-model.la libkernels/libnvfp4-kernels.la \
	libquant/libnvfp4-quant.la libformat/libnvfp4-format.la $(CHECK_LIBS) $(JANSSON_LIBS)
TESTS += tests/test-template

check_PROGRAMS += tests/test-kernels
tests_test_kernels_SOURCES = %reldir%/test-kernels.c %reldir%/testutil.h %reldir%/kref.h
tests_test_kernels_CPPFLAGS = $(TEST_CPPFLAGS)
tests_test_kernels_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
tests_test_kernels_LDADD = libkernels/libnvfp4-kernels.la libquant/libnvfp4-quant.la \
	libformat/libnvfp4-format.la $(CHECK_LIBS) $(JANSSON_LIBS) $(LIBM)
TESTS += tests/test-kernels
# Stand-in GPU backend plugins (tests/fake-backend.c) for the dlopen path;
# -rpath makes libtool build real shared objects in tests/.libs.
check_LTLIBRARIES = tests/nvfp4-backend-cuda.la tests/nvfp4-backend-hip.la
FAKE_BACKEND_FLAGS = -module -shared -avoid-version -rpath /nowhere
tests_nvfp4_backend_cuda_la_SOURCES = %reldir%/fake-backend.c
tests_nvfp4_backend_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libkernels \
	-DFAKE_NAME='"cuda"' -DFAKE_AVAILABLE=1
tests_nvfp4_backend_cuda_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_nvfp4_backend_cuda_la_LDFLAGS = $(FAKE_BACKEND_FLAGS)
tests_nvfp4_backend_hip_la_SOURCES = %reldir%/fake-backend.c
tests_nvfp4_backend_hip_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libkernels \
	-DFAKE_NAME='"hip"' -DFAKE_AVAILABLE=0
tests_nvfp4_backend_hip_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_nvfp4_backend_hip_la_LDFLAGS = $(FAKE_BACKEND_FLAGS)
# a cuda plug-in built for backend ABI version 3 (backend-load.test)
check_LTLIBRARIES += tests/abi3/nvfp4-backend-cuda.la
tests_abi3_nvfp4_backend_cuda_la_SOURCES = %reldir%/fake-backend.c
tests_abi3_nvfp4_backend_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libkernels \
	-DFAKE_NAME='"cuda"' -DFAKE_AVAILABLE=1 -DFAKE_ABI=3u
tests_abi3_nvfp4_backend_cuda_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_abi3_nvfp4_backend_cuda_la_LDFLAGS = $(FAKE_BACKEND_FLAGS)
tests_test_kernels_CPPFLAGS += -DFAKE_BACKEND_DIR='"$(abs_top_builddir)/tests/.libs"'
# The CPU backend's sources as a CPU other than x86 builds them (the
# generic C paths alone: NVFP4_CPU_GENERIC), so that code the x86 build
# leaves out keeps compiling; a convenience library nothing links.
check_LTLIBRARIES += tests/libcpu-generic.la
tests_libcpu_generic_la_SOURCES = libkernels/cpu.c libkernels/cpu-attn.c \
	libkernels/cpu-linear.c libkernels/cpu-nvfp4.c libkernels/cpu-i8avx2.c \
	libkernels/cpu-amx.c libkernels/cpu-dense.c libkernels/cpu-pool.c
tests_libcpu_generic_la_CPPFLAGS = $(libkernels_libnvfp4_kernels_la_CPPFLAGS) \
	-DNVFP4_CPU_GENERIC
tests_libcpu_generic_la_CFLAGS = $(libkernels_libnvfp4_kernels_la_CFLAGS)

# Hostile checkpoints (scripts/fixtures/gen_hostile.py, generated into
# tests/hostile of the build tree at each run): exit 1 with the message, in
# bounded time and peak RSS.
check_PROGRAMS += tests/test-hostile
tests_test_hostile_SOURCES = %reldir%/test-hostile.c
tests_test_hostile_CPPFLAGS = $(TEST_CPPFLAGS) \
	-DHOSTILE_DIR='"$(abs_top_builddir)/tests/hostile"' \
	-DGEN_HOSTILE='"$(abs_top_srcdir)/scripts/fixtures/gen_hostile.py"'
tests_test_hostile_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
tests_test_hostile_LDADD = $(CHECK_LIBS) $(JANSSON_LIBS)
EXTRA_tests_test_hostile_DEPENDENCIES = tools/nvfp4$(EXEEXT)
TESTS += tests/test-hostile

check_PROGRAMS += tests/test-lse
tests_test_lse_SOURCES = %reldir%/test-lse.c
tests_test_lse_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/libmodel
tests_test_lse_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_lse_LDADD = $(CHECK_LIBS) $(LIBM)
TESTS += tests/test-lse

check_PROGRAMS += tests/test-model
tests_test_model_SOURCES = %reldir%/test-model.c %reldir%/testutil.h %reldir%/toolrun.h \
	%reldir%/modelref.h
tests_test_model_CPPFLAGS = $(TEST_CPPFLAGS)
tests_test_model_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
tests_test_model_LDADD = libmodel/libnvfp4-model.la libkernels/libnvfp4-kernels.la \
	libquant/libnvfp4-quant.la libformat/libnvfp4-format.la $(CHECK_LIBS) \
	$(JANSSON_LIBS) $(LIBM)
TESTS += tests/test-model

check_PROGRAMS += tests/test-context
tests_test_context_SOURCES = %reldir%/test-context.c %reldir%/testutil.h \
	%reldir%/modelref.h
tests_test_context_CPPFLAGS = $(TEST_CPPFLAGS)
tests_test_context_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
tests_test_context_LDADD = libmodel/libnvfp4-model.la libkernels/libnvfp4-kernels.la \
	libquant/libnvfp4-quant.la libformat/libnvfp4-format.la $(CHECK_LIBS) \
	$(JANSSON_LIBS) $(LIBM)
TESTS += tests/test-context

# GPU: the kernels' number formats on the host (always), and the backends on
# a device (SKIP, exit 77, without one; modules from the build tree).
check_PROGRAMS += tests/test-gpu-numerics
tests_test_gpu_numerics_SOURCES = %reldir%/test-gpu-numerics.c %reldir%/testutil.h \
	libquant/numerics.h
tests_test_gpu_numerics_CPPFLAGS = $(TEST_CPPFLAGS) $(NUMERICS_CPPFLAGS)
tests_test_gpu_numerics_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS) \
	-ffp-contract=off
tests_test_gpu_numerics_LDADD = $(CHECK_LIBS) $(JANSSON_LIBS) $(LIBM)
TESTS += tests/test-gpu-numerics

check_PROGRAMS += tests/test-gpu
tests_test_gpu_SOURCES = %reldir%/test-gpu.c %reldir%/testutil.h %reldir%/kref.h \
	%reldir%/gpuselect.h
tests_test_gpu_CPPFLAGS = $(TEST_CPPFLAGS) -DGPU_MODULE_DIR='"$(abs_top_builddir)/libkernels/gpu/.libs"'
tests_test_gpu_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
tests_test_gpu_LDADD = libkernels/libnvfp4-kernels.la libquant/libnvfp4-quant.la \
	libformat/libnvfp4-format.la $(CHECK_LIBS) $(JANSSON_LIBS) $(LIBM)
TESTS += tests/test-gpu

check_PROGRAMS += tests/test-gpu-model
tests_test_gpu_model_SOURCES = %reldir%/test-gpu-model.c %reldir%/testutil.h \
	%reldir%/modelref.h %reldir%/gpuselect.h
tests_test_gpu_model_CPPFLAGS = $(TEST_CPPFLAGS) \
	-DGPU_MODULE_DIR='"$(abs_top_builddir)/libkernels/gpu/.libs"'
tests_test_gpu_model_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
tests_test_gpu_model_LDADD = libmodel/libnvfp4-model.la libkernels/libnvfp4-kernels.la \
	libquant/libnvfp4-quant.la libformat/libnvfp4-format.la $(CHECK_LIBS) \
	$(JANSSON_LIBS) $(LIBM)
TESTS += tests/test-gpu-model
endif

# nvfp4 template and generate --chat (shell)
TESTS += tests/template.test
EXTRA_DIST += tests/template.test tests/chat_like.py

# Programs built against the INSTALLED libraries with pkg-config alone:
# consumer-format with only `pkg-config nvfp4-format` (the format layer
# stands alone, shared), consumer-model with `pkg-config --static` and our
# four archives linked by path (the system libraries stay shared), which
# proves the .pc files' Requires.private / Libs.private complete; it must
# NEED no libnvfp4 at run time and match the PyTorch logits of the fixture.
# Under DESTDIR, PKG_CONFIG_SYSROOT_DIR maps the .pc paths into it.
EXTRA_DIST += %reldir%/consumer-format.c %reldir%/consumer-model.c
installcheck-local:
	PKG_CONFIG_PATH="$(DESTDIR)$(libdir)/pkgconfig:$$PKG_CONFIG_PATH" && \
	export PKG_CONFIG_PATH && \
	if test -n "$(DESTDIR)"; then \
	    PKG_CONFIG_SYSROOT_DIR="$(DESTDIR)" && export PKG_CONFIG_SYSROOT_DIR; fi && \
	$(CC) -o consumer-format $(srcdir)/tests/consumer-format.c \
	    `$(PKG_CONFIG) --cflags --libs nvfp4-format` && \
	LD_LIBRARY_PATH="$(DESTDIR)$(libdir)" ./consumer-format \
	    $(abs_srcdir)/tests/data/format/all_dtypes.safetensors && \
	libs=`$(PKG_CONFIG) --static --libs nvfp4-model` && \
	libs=`echo " $$libs " | sed 's| -lnvfp4-\([a-z]*\) | $(DESTDIR)$(libdir)/libnvfp4-\1.a |g'` && \
	echo "static link: $$libs" && \
	$(CC) -o consumer-model $(srcdir)/tests/consumer-model.c \
	    `$(PKG_CONFIG) --cflags --static nvfp4-model` $$libs && \
	if $(READELF) -d consumer-model | grep 'NEEDED.*libnvfp4'; then \
	    echo "consumer-model: linked a shared libnvfp4" >&2; exit 1; fi && \
	./consumer-model $(abs_srcdir)/tests/data/models/tiny && \
	rm -f consumer-format consumer-model

# Opt-in, not in CI: the real SmolLM2 NVFP4 model against PyTorch (needs the
# model cache, built on first use with the Python venv).
check-real: all
	$(SHELL) $(srcdir)/scripts/check-real.sh $(abs_top_builddir)/tools/nvfp4
.PHONY: check-real

# the generated hostile corpus (a recipe-less clean-local, so that other
# directories may hook theirs too)
clean-local: clean-hostile
clean-hostile:
	-rm -rf tests/hostile
.PHONY: clean-hostile

# nvfp4 serve end to end (tests/serve/serve.test): plain HTTP always, the
# real openai client when build/venv-serve exists (scripts/setup-serve-venv.sh).
EXTRA_DIST += %reldir%/serve/serve.test %reldir%/serve/serve-http.test \
	%reldir%/serve/serve-openai.test %reldir%/serve/serve_common.py \
	%reldir%/serve/serve_http.py %reldir%/serve/serve_openai.py
if HAVE_MHD
TESTS += %reldir%/serve/serve-http.test %reldir%/serve/serve-openai.test
endif
clean-local: clean-serve-tests
clean-serve-tests:
	rm -rf tests/serve-http.d tests/serve-openai.d
.PHONY: clean-serve-tests
# libFuzzer harness of the server's request parser and its seed corpus
# (built by tests/fuzz/local.mk under --enable-fuzzing).
# (tests/fuzz/local.mk builds fuzz-request and distributes its corpus)
