#!/usr/bin/env python3
"""The quality table: the demo model's held-out perplexity and KL per format.

    python3 tools/demo_model/quality.py --waste build/bin/waste --out /tmp/quality
    python3 tools/demo_model/quality.py ... --extra warp-vq3r=/path/to/container   # any other container
    python3 tools/demo_model/quality.py ... --oracle bf16r   # no torch: waste's BF16R container is the reference

The checkpoint (models/demo-moe) is converted by `waste convert` into every
expert format (BF16R, VQ3R, VQ2R, VQ4P) with the trunk at 16, 8 and 4 bits,
and each container scores heldout.txt with `waste eval --perplexity` in
process, with the exact and the int8 lookup table, and where a product is
4-bit (Q4GR experts, a 4-bit trunk) with exact and int8 inputs
(`--q4-input`; AVX-512 only, elsewhere the same as exact). The oracle is the
checkpoint's own PyTorch forward pass (transformers' DeepseekV3ForCausalLM,
float32, eager attention) on the same token ids in the same windows, or
with `--oracle bf16r` the lossless BF16R container with a 16-bit trunk
through waste (which equals PyTorch's perplexity to 4 digits:
demo_model_test), so that the table can be made where torch is not. Per
row: waste's perplexity, the mean next-token KL(PyTorch || waste) in nats,
and how often both pick the same most likely token. Writes quality.json
and quality.md to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time

import numpy as np
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKPOINT = os.path.join(HERE, "..", "..", "models", "demo-moe")


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def windows_of(ids: list[int], window: int, count: int) -> list[list[int]]:
    out = []
    for start in range(0, len(ids) - 1, window):
        if len(out) == count:
            break
        w = ids[start:start + window]
        if len(w) >= 2:
            out.append(w)
    return out


def score(logp: list[np.ndarray], wins: list[list[int]]) -> tuple[float, int]:
    nll, n = 0.0, 0
    for lp, w in zip(logp, wins):
        nll -= sum(lp[t, w[t + 1]] for t in range(len(w) - 1))
        n += len(w) - 1
    return nll / n, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--waste", required=True)
    ap.add_argument("--checkpoint", default=CHECKPOINT)
    ap.add_argument("--out", required=True)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--extra", action="append", default=[], help="NAME=CONTAINER, scored the same way")
    ap.add_argument("--oracle", choices=("pytorch", "bf16r"), default="pytorch")
    ap.add_argument("--only", default="", help="score only the rows whose name contains this")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    text_path = os.path.join(args.checkpoint, "heldout.txt")
    text = open(text_path, encoding="utf-8").read()
    tok = Tokenizer.from_file(os.path.join(args.checkpoint, "tokenizer.json"))
    config = json.load(open(os.path.join(args.checkpoint, "config.json")))
    ids = [config["bos_token_id"]] + tok.encode(text, add_special_tokens=False).ids
    wins = windows_of(ids, args.window, args.windows)

    def waste_logprobs(c, targs):  # per window, [tokens][vocab], and what waste reports
        logits = os.path.join(args.out, "logits.bin")
        out = subprocess.run([args.waste, "eval", c, "--perplexity", text_path, "--window", str(args.window),
                              "--windows", str(args.windows), "--logits", logits, "--local", "--json"] + targs,
                             check=True, capture_output=True, text=True).stdout
        flat = np.fromfile(logits, dtype=np.float32).reshape(-1, config["vocab_size"])
        got, at = [], 0
        for w in wins:
            got.append(log_softmax(flat[at:at + len(w)]))
            at += len(w)
        return got, json.loads(out)

    def convert(c, conv):  # seconds, or None when it was there already
        if os.path.exists(os.path.join(c, "manifest.json")):
            return None
        t0 = time.time()
        subprocess.run([args.waste, "convert", args.checkpoint, c, "--quiet"] + conv, check=True)
        return time.time() - t0

    if args.oracle == "pytorch":
        import torch
        from transformers import DeepseekV3ForCausalLM
        torch.set_num_threads(2)
        model = DeepseekV3ForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32,
                                                      attn_implementation="eager").eval()
        ref = []
        with torch.no_grad():
            for w in wins:
                ref.append(log_softmax(model(input_ids=torch.tensor([w])).logits[0].numpy()))
        ref_name = "PyTorch (float32 on the bf16 weights)"
    else:
        c = os.path.join(args.out, "bf16-t16")
        convert(c, ["--expert-format", "bf16", "--trunk-bits", "16"])
        ref, _ = waste_logprobs(c, [])
        ref_name = "waste, BF16R experts, trunk 16-bit (the oracle)"
    ref_nll, scored = score(ref, wins)
    rows = [{"name": ref_name, "perplexity": math.exp(ref_nll), "mean_nll": ref_nll, "kl": 0.0, "top1": 1.0}]
    print(f"{ref_name}: perplexity {math.exp(ref_nll):.4f} over {scored} tokens", flush=True)

    variants = []  # (name, container, convert args or None, eval args)
    for fmt, label in (("bf16", "BF16R"), ("q4gr", "Q4GR"), ("vq3r", "VQ3R"), ("vq2r", "VQ2R"),
                       ("vq4p", "VQ4P")):
        for bits in (16, 8, 4):
            if fmt != "bf16" and bits == 16:
                continue
            c = os.path.join(args.out, f"{fmt}-t{bits}")
            conv = ["--expert-format", fmt, "--trunk-bits", str(bits)]
            tables = [("", [])] if fmt in ("bf16", "q4gr") else [(", exact table", []),
                                                                  (", int8 table", ["--expert-table", "i8"])]
            if fmt == "q4gr" or bits == 4:  # AVX-512's 4-bit products with 8-bit inputs
                tables += [(f"{tlabel}, int8 inputs", targs + ["--q4-input", "i8"]) for tlabel, targs in tables]
            for tlabel, targs in tables:
                variants.append((f"{label} experts, trunk {bits}-bit{tlabel}", c, conv, targs))
    for spec in args.extra:
        name, _, c = spec.partition("=")
        for tlabel, targs in ((", exact table", []), (", int8 table", ["--expert-table", "i8"])):
            variants.append((f"{name}{tlabel}", c, None, targs))

    def kl_of(got, want):  # mean next-token KL(want || got) and how often the argmax agrees
        kl, same = 0.0, 0
        for lp, r in zip(got, want):
            kl += float((np.exp(r[:-1]) * (r[:-1] - lp[:-1])).sum())
            same += int((r[:-1].argmax(-1) == lp[:-1].argmax(-1)).sum())
        return kl, same

    converted = {}
    logp_of = {}  # (container, eval args) -> its log-probabilities
    for name, c, conv, targs in variants:
        if args.only not in name:
            continue
        if conv is not None and c not in converted:
            converted[c] = convert(c, conv)
        got, reported = waste_logprobs(c, targs)
        logp_of[(c, tuple(targs))] = got
        kl, same = kl_of(got, ref)
        nll, n = score(got, wins)
        if n != reported["scored"] or abs(nll - reported["mean_nll"]) > 1e-6:
            raise SystemExit(f"{name}: waste reports {reported} but its logits give {nll} over {n}")
        row = {"name": name, "container": os.path.basename(c), "perplexity": math.exp(nll), "mean_nll": nll,
               "kl": kl / n, "top1": same / n, "convert_seconds": converted.get(c)}
        exact = logp_of.get((c, tuple(targs[:-2])))  # int8 inputs against the same exact row
        if targs[-2:] == ["--q4-input", "i8"] and exact is not None:
            row["kl_vs_exact_inputs"] = kl_of(got, exact)[0] / n
        rows.append(row)
        print(f"{name}: perplexity {row['perplexity']:.4f}  KL {row['kl']:.5f}  top-1 {row['top1']:.4f}", flush=True)

    result = {"checkpoint": os.path.abspath(args.checkpoint), "window": args.window, "windows": len(wins),
              "scored_tokens": scored, "rows": rows}
    with open(os.path.join(args.out, "quality.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "quality.md"), "w") as f:
        f.write("| weights | perplexity | vs the oracle | KL (nats/token) | same top-1 | KL vs exact inputs |\n"
                "|---|---|---|---|---|---|\n")
        for r in rows:
            against = f"{r['kl_vs_exact_inputs']:.5f}" if "kl_vs_exact_inputs" in r else ""
            f.write(f"| {r['name']} | {r['perplexity']:.4f} | {r['perplexity'] / rows[0]['perplexity'] - 1:+.2%} | "
                    f"{r['kl']:.5f} | {r['top1']:.2%} | {against} |\n")
    print(open(os.path.join(args.out, "quality.md")).read())


if __name__ == "__main__":
    main()
