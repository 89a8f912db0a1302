#!/usr/bin/env python3
"""Fixtures for tests/k3_parts_test.cc: Kimi K3's new formulas on random
inputs, transcribed independently of the engine from the equations of the
published modeling code (modeling_kimi_linear.py's SituAndMul and
_apply_attn_res, fla's naive_kda_lowerbound_gate and naive_kda_gate, as
WARP's docs/K3.md records them), computed in float64 with torch.

    /work/pyenv/bin/python tools/k3_parts/make_fixtures.py tests/fixtures/k3_parts/parts.json
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(22)
D = torch.float64


def rnd(*shape, scale=1.0):
    return (torch.randn(*shape, dtype=D) * scale)


def floats(t):
    # float32 values, so the C++ side starts from exactly these inputs
    return [float(x) for x in t.float().double().flatten()]


def main(out):
    fx = {}

    # SiTU: beta*tanh(g/beta)*sigmoid(g) * linear_beta*tanh(u/linear_beta),
    # or * u when linear_beta is 0. K3's betas 4 and 25, and without the
    # linear one. Gate and up values spread over +-40 to reach both tanh's
    # saturation.
    situ = []
    for beta, lbeta in ((4.0, 25.0), (4.0, 0.0), (1.5, 3.0)):
        g = torch.tensor(floats(rnd(256, scale=12.0)), dtype=D)
        u = torch.tensor(floats(rnd(256, scale=12.0)), dtype=D)
        a = beta * torch.tanh(g / beta) * torch.sigmoid(g)
        y = a * (lbeta * torch.tanh(u / lbeta) if lbeta > 0 else u)
        situ.append({"beta": beta, "linear_beta": lbeta, "g": floats(g), "u": floats(u),
                     "out": [float(x) for x in y]})
    fx["situ"] = situ

    # KDA's decay gate, z = projection + dt_bias: K3's bounded form
    # lower_bound * sigmoid(exp(A_log[h]) * z), one A_log per head, and
    # Kimi-Linear's -exp(A_log[h]) * softplus(z), from the same inputs.
    H, Dh = 4, 16
    z = torch.tensor(floats(rnd(H, Dh, scale=4.0)), dtype=D).view(H, Dh)
    a_log = torch.tensor(floats(torch.log(torch.rand(H, dtype=D) * 15 + 1)), dtype=D)
    A = a_log.exp().view(H, 1)
    lb = -5.0
    fx["decay"] = {"heads": H, "head_dim": Dh, "lower_bound": lb, "a_log": floats(a_log),
                   "z": floats(z),
                   "bounded": [float(x) for x in (lb * torch.sigmoid(A * z)).flatten()],
                   "kimi_linear": [float(x) for x in (-A * F.softplus(z)).flatten()]}

    # Attention Residuals: v = [blocks..., partial], k = v / rms(v) (eps inside),
    # scores = sum(k * norm_w * proj_w), out = softmax(scores) @ v.
    ares = []
    for nb, n, eps in ((1, 64, 1e-5), (3, 96, 1e-5), (8, 128, 1e-6)):
        blocks = torch.tensor(floats(rnd(nb, n, scale=2.0)), dtype=D).view(nb, n)
        partial = torch.tensor(floats(rnd(n)), dtype=D)
        nw = torch.tensor(floats(1 + 0.1 * rnd(n)), dtype=D)
        pw = torch.tensor(floats(rnd(n, scale=(3.0 / n) ** 0.5)), dtype=D)
        v = torch.cat([blocks, partial.unsqueeze(0)], 0)
        k = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
        p = (k * (nw * pw)).sum(-1).softmax(-1)
        y = p @ v
        ares.append({"blocks": nb, "width": n, "eps": eps, "block_values": floats(blocks),
                     "partial": floats(partial), "norm_w": floats(nw), "proj_w": floats(pw),
                     "out": [float(x) for x in y]})
    fx["attn_res"] = ares

    with open(out, "w") as f:
        json.dump(fx, f)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
