#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The PyTorch emulation of an NVFP4 Linear (spec sections 2 and 5, the
way the fixtures' reference forward computes it) timed on the CPU, for the
shapes of bench/bench-kernels: dequantize the packed weight, quantize-
dequantize the activations (W4A4) and multiply in float32, with 1 and 2
threads.  Prints GB/s of NVFP4 weight bytes for one token and GFLOPS for
16..512 tokens, comparable with bench-kernels' table.

Usage: build/venv/bin/python scripts/bench-kernels-torch.py [NxK ...]
"""
import sys
import time

import torch

E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])
SHAPES = [(4096, 4096), (4096, 14336), (14336, 4096), (576, 576), (192, 576),
          (1536, 576), (576, 1536), (49152, 576)]


def dequant(packed, scales, s2):
    """Section 2: codes * (E4M3 block scale * weight_scale_2), float32."""
    n = packed.shape[0]
    lo, hi = (packed & 0xF).long(), (packed >> 4).long()
    codes = E2M1[torch.stack([lo, hi], dim=-1).reshape(n, -1)]
    bs = scales.view(torch.float8_e4m3fn).float() * s2
    return (codes.reshape(n, -1, 16) * bs.unsqueeze(-1)).reshape(n, -1)


def qdq(x, input_scale):
    """Section 5 (vLLM's emulation formula), float32."""
    gs = 1.0 / torch.tensor(input_scale, dtype=torch.float32)
    xb = x.reshape(x.shape[0], -1, 16)
    amax = xb.abs().amax(-1, keepdim=True)
    s = (gs * (amax * torch.tensor(1 / 6, dtype=torch.float32))).clamp(-448, 448)
    s = s.to(torch.float8_e4m3fn).float()
    osc = torch.where(s == 0, torch.zeros_like(s), gs / s)
    v = (xb * osc).clamp(-6, 6)
    grid = E2M1[:8]
    q = grid[(v.abs().unsqueeze(-1) - grid).abs().argmin(-1)] * v.sign()  # nearest
    return (q * (s / gs)).reshape(x.shape)


def best(fn, budget=0.15):
    fn()
    t0, b, reps = time.perf_counter(), 1e30, 0
    while time.perf_counter() - t0 < budget or reps < 2:
        a = time.perf_counter()
        fn()
        b = min(b, time.perf_counter() - a)
        reps += 1
    return b


def main():
    shapes = [tuple(int(v) for v in a.split("x")) for a in sys.argv[1:]] or SHAPES
    g = torch.Generator().manual_seed(1)
    print("# PyTorch %s emulation (dequantize every call, float32 matmul)" % torch.__version__)
    for th in (1, 2):
        torch.set_num_threads(th)
        for n, k in shapes:
            packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=g)
            scales = torch.randint(0x28, 0x58, (n, k // 16), dtype=torch.uint8, generator=g)
            wbytes = n * k // 2 + n * k // 16
            x1 = torch.randn(1, k, generator=g)
            t16 = best(lambda: x1 @ dequant(packed, scales, 0.001).T)
            t4 = best(lambda: qdq(x1, 0.003) @ dequant(packed, scales, 0.001).T)
            print("%6dx%-6d th=%d GEMV  w4a16 %6.2f GB/s  w4a4 %6.2f GB/s"
                  % (n, k, th, wbytes / t16 * 1e-9, wbytes / t4 * 1e-9), flush=True)
            for m in (16, 64, 128, 512):
                x = torch.randn(m, k, generator=g)
                t16 = best(lambda: x @ dequant(packed, scales, 0.001).T)
                t4 = best(lambda: qdq(x, 0.003) @ dequant(packed, scales, 0.001).T)
                fl = 2.0 * m * n * k
                print("%6dx%-6d th=%d m=%-4d w4a16 %7.1f  w4a4 %7.1f GFLOPS"
                      % (n, k, th, m, fl / t16 * 1e-9, fl / t4 * 1e-9), flush=True)


if __name__ == "__main__":
    main()
