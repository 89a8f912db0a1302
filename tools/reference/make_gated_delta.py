"""The Gated DeltaNet state step's oracle: fla's naive_recurrent_gated_delta_rule.

Writes tests/fixtures/forward/gated-delta.json, which recurrence_test checks
kernels::GatedDeltaStateStep against: H heads of a [dk][dv] state, a random
initial state, T steps of random q, k (L2-normalized, as the layer feeds
them), v, g (log decay) and beta; fla's outputs at every step and its final
state. q is stored already scaled by dk^-0.5 in float32 (as fla scales it),
so that the C++ step gets fla's exact inputs.

    /work/pyenv/bin/python tools/reference/make_gated_delta.py --out tests/fixtures/forward/gated-delta.json
"""
import argparse
import importlib.util
import json
import pathlib

import torch


def naive_module():
    # fla's package __init__ needs Triton and a GPU: load the one file by path.
    spec = importlib.util.find_spec("fla")
    root = pathlib.Path(spec.submodule_search_locations[0])
    path = root / "ops" / "gated_delta_rule" / "naive.py"
    s = importlib.util.spec_from_file_location("fla_gdr_naive", path)
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    return m, path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    naive, path = naive_module()
    torch.manual_seed(21)
    H, T, dk, dv = 2, 8, 16, 32
    q = torch.nn.functional.normalize(torch.randn(1, T, H, dk), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(1, T, H, dk), dim=-1)
    v = torch.randn(1, T, H, dv)
    g = -torch.rand(1, T, H) * 2.0  # log decay in (-2, 0]
    beta = torch.rand(1, T, H)
    s0 = torch.randn(1, H, dk, dv) * 0.5
    scale = dk ** -0.5
    o, sT = naive.naive_recurrent_gated_delta_rule(
        q, k, v, beta, g, scale=scale, initial_state=s0, output_final_state=True)
    q_scaled = q * scale  # fla's own float32 product
    decay = g.exp()       # fla's exp(g), float32
    flat = lambda t: [float(x) for x in t.reshape(-1).tolist()]
    out = {
        "oracle": "fla 0.6.0 naive_recurrent_gated_delta_rule (" + path.name + ")",
        "maker": "tools/reference/make_gated_delta.py",
        "heads": H, "steps": T, "dk": dk, "dv": dv,
        "layout": "q_scaled, k: [T][H][dk]; v, o: [T][H][dv]; decay, beta: [T][H]; "
                  "initial_state, final_state: [H][dk][dv]",
        "q_scaled": flat(q_scaled), "k": flat(k), "v": flat(v),
        "decay": flat(decay), "beta": flat(beta),
        "initial_state": flat(s0), "o": flat(o), "final_state": flat(sT),
    }
    pathlib.Path(args.out).write_text(json.dumps(out, indent=0) + "\n")


if __name__ == "__main__":
    main()
