# SPDX-License-Identifier: MIT
"""Speed of the PyTorch (vLLM-style) emulation of a Quark NVFP4 checkpoint:
weights dequantized once, activations quantize-dequantized per spec section 5
in every Linear (scripts/fixtures/gen_models.py: build_emulation).  A baseline
for scripts/bench-model.sh, never a dependency of the libraries.

usage: torch_emul_speed.py MODEL_DIR --threads N --prefill 512 --decode 32
prints one JSON line: prefill_tok_s, decode_tok_s
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=32)
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    import gen_models
    emu = gen_models.build_emulation(a.model)[0]
    vocab = emu.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, a.prefill), generator=g)
    with torch.no_grad():
        emu(ids[:, :16])  # warm-up
        t = time.perf_counter()
        out = emu(ids, use_cache=True)
        t_pre = time.perf_counter() - t
        past = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        t = time.perf_counter()
        for _ in range(a.decode):
            out = emu(nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
        t_dec = time.perf_counter() - t
    print(json.dumps({"prefill_tok_s": a.prefill / t_pre, "decode_tok_s": a.decode / t_dec,
                      "threads": a.threads, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
