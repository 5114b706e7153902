# SPDX-License-Identifier: MIT
"""Write a random-weight llama.cpp GGUF of a Llama config.json (with the
`gguf` package), for scripts/bench-llama.sh: the same shapes as the
checkpoint `nvfp4 synth --like` writes, Q4_0 projections (4.5 bits per
weight, NVFP4's byte count) and a tied embedding/head as F16 (--head f16:
the same bytes per token as nvfp4's BF16 head) or Q6_K (--head q6_k: what
llama-quantize's Q4_0 makes of a tied model, llama.cpp's default file).
An untied model (Llama-3-8B) gets an F16 embedding and head (--head f16)
or a Q4_0 embedding and a Q6_K head (--head q6_k, llama-quantize's Q4_0).
The tensors are written one at a time (an 8B file never sits in memory).
Speed only: the blocks are random bytes with a small, finite scale.

Usage: gguf_llama.py CONFIG.json OUT.gguf [--head f16|q6_k] [--seed S]
"""
import argparse
import json

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT


def random_q4_0(rng, rows, cols):
    """[rows, cols] Q4_0: per 32 weights an f16 scale and 16 bytes of nibbles."""
    blocks = rng.integers(0, 256, size=(rows, cols // 32, 18), dtype=np.uint8)
    blocks[:, :, 0:2] = np.frombuffer(np.float16(0.002).tobytes(), dtype=np.uint8)
    return blocks.reshape(rows, cols // 32 * 18)


def random_q6_k(rng, rows, cols):
    """[rows, cols] Q6_K: per 256 weights ql[128], qh[64], int8 scales[16], f16 d."""
    blocks = rng.integers(0, 256, size=(rows, cols // 256, 210), dtype=np.uint8)
    blocks[:, :, 192:208] = rng.integers(1, 64, size=(rows, cols // 256, 16), dtype=np.uint8)
    blocks[:, :, 208:210] = np.frombuffer(np.float16(0.0001).tobytes(), dtype=np.uint8)
    return blocks.reshape(rows, cols // 256 * 210)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--head", choices=("f16", "q6_k"), default="f16")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    c = json.load(open(a.config))
    H, I, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    nh, nkv, V = c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]
    hd = c.get("head_dim", H // nh)
    tied = c.get("tie_word_embeddings", False)
    rng = np.random.default_rng(a.seed)

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name("bench-llama (random weights)")
    w.add_context_length(c.get("max_position_embeddings", 8192))
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(I)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(c.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(c.get("rms_norm_eps", 1e-5))
    w.add_vocab_size(V)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    # a SentencePiece-style vocabulary of V tokens: <unk>, <s>, </s>, the 256
    # byte tokens llama.cpp looks up, then placeholders
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    toks += ["t%d" % i for i in range(V - len(toks))]
    types += [gguf.TokenType.NORMAL] * (V - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * V)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    # the tensors in file order: (name, byte shape or shape, dtype, raw
    # type, generator); their infos go first, then the data one tensor at
    # a time (an 8B file never sits in memory whole)
    def q4(rows, cols):
        return ((rows, cols // 32 * 18), np.uint8, QT.Q4_0, lambda: random_q4_0(rng, rows, cols))

    def f16(rows, cols):
        return ((rows, cols), np.float16, None,
                lambda: (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02)
                .astype(np.float16))

    def q6k(rows, cols):
        return ((rows, cols // 256 * 210), np.uint8, QT.Q6_K, lambda: random_q6_k(rng, rows, cols))

    def norm():
        return ((H,), np.float32, None, lambda: np.ones(H, dtype=np.float32))

    head = f16 if a.head == "f16" else q6k
    # untied (Llama-3-8B): llama-quantize's Q4_0 keeps the embedding Q4_0
    # and the head Q6_K; with --head f16 both are F16 (nvfp4's BF16 pair)
    ts = [("token_embd.weight", head(V, H) if tied or a.head == "f16" else q4(V, H))]
    for l in range(L):
        p = "blk.%d." % l
        ts += [(p + "attn_norm.weight", norm()),
               (p + "attn_q.weight", q4(nh * hd, H)),
               (p + "attn_k.weight", q4(nkv * hd, H)),
               (p + "attn_v.weight", q4(nkv * hd, H)),
               (p + "attn_output.weight", q4(H, nh * hd)),
               (p + "ffn_norm.weight", norm()),
               (p + "ffn_gate.weight", q4(I, H)),
               (p + "ffn_up.weight", q4(I, H)),
               (p + "ffn_down.weight", q4(H, I))]
    ts.append(("output_norm.weight", norm()))
    if not tied:
        ts.append(("output.weight", head(V, H)))
    for name, (shape, dt, raw, _) in ts:
        w.add_tensor_info(name, shape, np.dtype(dt), int(np.prod(shape)) * np.dtype(dt).itemsize,
                          raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, (_, _, _, gen) in ts:
        w.write_tensor_data(gen())
    w.close()


if __name__ == "__main__":
    main()
