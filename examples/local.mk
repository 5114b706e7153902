# SPDX-License-Identifier: MIT
# Example programs on the public API, built by make check and run by its
# tests (they are documentation that must keep working).
check_PROGRAMS += examples/generate
examples_generate_SOURCES = %reldir%/generate.c
examples_generate_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
examples_generate_LDADD = libmodel/libnvfp4-model.la
TESTS += tests/example-generate.test tests/readme-example.test
EXTRA_DIST += tests/example-generate.test tests/readme-example.test
