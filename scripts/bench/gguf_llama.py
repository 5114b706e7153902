# SPDX-License-Identifier: MIT
"""Write a random-weight llama.cpp GGUF of a Llama config.json (with the
`gguf` package), for scripts/bench-llama.sh: the same shapes as the
checkpoint `nvfp4 synth --like` writes, Q4_0 projections (4.5 bits per
weight, NVFP4's byte count) and a tied embedding/head as F16 (--head f16:
the same bytes per token as nvfp4's BF16 head) or Q6_K (--head q6_k: what
llama-quantize's Q4_0 makes of a tied model, llama.cpp's default file).
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
    if not c.get("tie_word_embeddings", False):
        raise SystemExit("gguf_llama.py: only tied embeddings (the benchmark's shape)")
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

    if a.head == "f16":
        emb = (rng.standard_normal((V, H), dtype=np.float32) * 0.02).astype(np.float16)
        w.add_tensor("token_embd.weight", emb)
    else:
        w.add_tensor("token_embd.weight", random_q6_k(rng, V, H), raw_dtype=QT.Q6_K)
    ones = np.ones(H, dtype=np.float32)
    for l in range(L):
        p = "blk.%d." % l
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", random_q4_0(rng, nh * hd, H), raw_dtype=QT.Q4_0)
        w.add_tensor(p + "attn_k.weight", random_q4_0(rng, nkv * hd, H), raw_dtype=QT.Q4_0)
        w.add_tensor(p + "attn_v.weight", random_q4_0(rng, nkv * hd, H), raw_dtype=QT.Q4_0)
        w.add_tensor(p + "attn_output.weight", random_q4_0(rng, H, nh * hd), raw_dtype=QT.Q4_0)
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", random_q4_0(rng, I, H), raw_dtype=QT.Q4_0)
        w.add_tensor(p + "ffn_up.weight", random_q4_0(rng, I, H), raw_dtype=QT.Q4_0)
        w.add_tensor(p + "ffn_down.weight", random_q4_0(rng, H, I), raw_dtype=QT.Q4_0)
    w.add_tensor("output_norm.weight", ones)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
