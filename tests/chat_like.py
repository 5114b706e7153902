# SPDX-License-Identifier: MIT
"""Write the config.json of a chat model for `nvfp4 synth --like`.

The tiny fixture's shape (tests/data/models/tiny/config.json, unquantized:
synth quantizes it), 2 layers, with a vocabulary that holds every id of the
given tokenizer.json (a tokenizer whose ids reach past vocab_size is
refused).  Used by tests/template.test and tests/serve/serve.test.

usage: chat_like.py TINY_CONFIG TOKENIZER_JSON MAX_POSITIONS OUT_CONFIG
"""
import json
import sys

config, tokenizer, max_pos, out = sys.argv[1:5]
c = json.load(open(config))
c.pop("quantization_config", None)
t = json.load(open(tokenizer))
v = max(list(t["model"]["vocab"].values()) + [a["id"] for a in t["added_tokens"]]) + 1
c.update(vocab_size=v, max_position_embeddings=int(max_pos), num_hidden_layers=2)
json.dump(c, open(out, "w"))
