# SPDX-License-Identifier: MIT
# nvfp4(1), installed into $(man1dir); tests/man.test keeps it true to the
# tool's --help (and renders it with the warnings on).
dist_man1_MANS = %reldir%/nvfp4.1
TESTS += tests/man.test
EXTRA_DIST += tests/man.test
