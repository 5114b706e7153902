#!/bin/sh
# SPDX-License-Identifier: MIT
# make check-real: the real SmolLM2-135M NVFP4 checkpoint (Quark export, cache
# outside the repo; built on first use by scripts/fixtures/make-smollm2.sh)
# scored by nvfp4 on the evaluation text, against the perplexity the PyTorch
# emulation computed on the same tokens (reference.json beside the model).
#
#   W4A16 (weight-only) model: token perplexity within 0.5%.
#   W4A4 model: within 0.5% or within the emulation's own noise floor,
#   whichever is larger.  W4A4 emulation is chaotic: an activation that lands
#   exactly on an E2M1/E4M3 rounding tie flips with a one-ulp change of its
#   float32 input, and the flip propagates through the KV cache; the same
#   PyTorch emulation with float64 matmuls moves the perplexity by more than
#   0.5% (reference.json "noise_floor").
# Also checks that nvfp4's tokenizer gives the reference's token count.
#
# Usage: scripts/check-real.sh [PATH-TO-nvfp4]
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NVFP4=${1:-$ROOT/build/release/tools/nvfp4}
CACHE=${NVFP4_CACHE:-$HOME/.cache/nvfp4}
status=0

check() {  # model-dir strict(0|1)
    dir=$1; strict=$2
    ref="$dir/reference.json"
    if [ ! -f "$ref" ]; then
        echo "check-real: $ref missing; building it (needs the Python venv)"
        "$ROOT/scripts/fixtures/make-smollm2.sh" || { echo "check-real: could not build $dir"; return 1; }
    fi
    eval "$(python3 - "$ref" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
e = r["eval"]
print("EVALFILE='%s' CTX=%d PREFIX=%d NTOK=%d" % (e["file"], e["ctx"], e["prefix_token"], e["tokens"]))
p = r.get("perplexity_emulation") or r["perplexity"]
print("REFPPL=%.10g" % p["token_perplexity"])
nf = r.get("noise_floor") or {}
print("NOISE=%.10g" % abs(float(nf.get("token_ppl_rel_diff", 0.0))))
PY
)"
    out=$("$NVFP4" ppl "$dir" --text "$EVALFILE" --ctx "$CTX" --prefix "$PREFIX" --json)
    python3 - "$out" "$REFPPL" "$NTOK" "$NOISE" "$strict" "$dir" <<'PY' || status=1
import json, sys
got = json.loads(sys.argv[1]); ref = float(sys.argv[2]); ntok = int(sys.argv[3])
noise = float(sys.argv[4]); strict = sys.argv[5] == "1"; name = sys.argv[6]
tol = 0.005 if strict else max(0.005, noise)
rel = got["token_perplexity"] / ref - 1
ok = got["tokens"] == ntok and abs(rel) <= tol
print("%s %s: nvfp4 token ppl %.4f, PyTorch emulation %.4f (%+.2f%%, allowed %.2f%%), tokens %d/%d (%.0f s)"
      % ("PASS" if ok else "FAIL", name, got["token_perplexity"], ref, 100 * rel, 100 * tol,
         got["tokens"], ntok, got["seconds"]))
sys.exit(0 if ok else 1)
PY
}

check "$CACHE/smollm2-135m-nvfp4" 0
if [ -f "$CACHE/smollm2-135m-nvfp4-w4a16/reference.json" ]; then
    check "$CACHE/smollm2-135m-nvfp4-w4a16" 1
else
    echo "SKIP smollm2-135m-nvfp4-w4a16: not built (scripts/fixtures/make-smollm2.sh builds it)"
fi
exit $status
