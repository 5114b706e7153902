#!/bin/sh
# SPDX-License-Identifier: MIT
# The small Python venv of the server's tests (tests/serve.test): the real
# `openai` client, pinned with its dependencies.  Idempotent; a venv whose
# stamp matches the pins is kept.
#
#   scripts/setup-serve-venv.sh [DIR]    (default: build/venv-serve)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${1:-$ROOT/build/venv-serve}
# openai and everything it pulls in, pinned (pip freeze of a clean install).
PINS="openai==3.57.0 annotated-types==0.8.0 anyio==4.16.0 h11==0.16.0 httpcore2==2.16.2 \
httpx2==2.16.2 idna==3.20 jiter==0.19.0 pydantic==2.14.4 pydantic_core==2.50.5 sniffio==1.3.1 \
truststore==0.10.5 typing-inspection==0.4.5 typing_extensions==4.16.0"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.pins" 2>/dev/null)" = "$PINS" ]; then
    exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check $PINS
echo "$PINS" > "$VENV/.pins"
echo "setup-serve-venv: $VENV ($PINS)"
