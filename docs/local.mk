# SPDX-License-Identifier: MIT
# docs/: the architecture page, and the API reference (Doxygen, optional):
# `make html` writes docs/api/html from the public headers when configure
# found doxygen, `make install-html` installs it into $(htmldir)/api.
# tests/doxygen.test fails on any Doxygen warning about the documented headers.
EXTRA_DIST += %reldir%/ARCHITECTURE.md %reldir%/DIALECTS.md %reldir%/Doxyfile.in
TESTS += tests/doxygen.test
EXTRA_DIST += tests/doxygen.test
AM_TESTS_ENVIRONMENT += DOXYGEN='$(DOXYGEN)'; export DOXYGEN;

if HAVE_DOXYGEN
html-local: %reldir%/api/html/index.html

%reldir%/api/html/index.html: %reldir%/Doxyfile $(nvfp4include_HEADERS)
	$(AM_V_GEN)rm -rf %reldir%/api && $(MKDIR_P) %reldir%/api && \
	$(DOXYGEN) %reldir%/Doxyfile && \
	grep -v '/include/nvfp4/model\.h:' %reldir%/api/warnings.log >&2; \
	n=`grep -c '/include/nvfp4/model\.h:' %reldir%/api/warnings.log`; \
	test "$$n" = 0 || echo "make html: $$n warnings about nvfp4/model.h," \
	    "not yet documented (%reldir%/api/warnings.log)" >&2

install-html-local: html-local
	$(MKDIR_P) "$(DESTDIR)$(htmldir)/api"
	for f in %reldir%/api/html/*; do \
	    $(INSTALL_DATA) "$$f" "$(DESTDIR)$(htmldir)/api/" || exit 1; \
	done
else
html-local install-html-local:
	@echo "make $@: doxygen was not found when configure ran; install doxygen" \
	    "(Debian: apt-get install doxygen) and run configure again" >&2; \
	exit 1
endif

uninstall-local:
	rm -rf "$(DESTDIR)$(htmldir)/api"

clean-local:
	rm -rf %reldir%/api
