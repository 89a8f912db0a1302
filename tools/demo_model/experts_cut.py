#!/usr/bin/env python3
"""What routing fewer experts per token costs the demo model (--experts-per-token).

    python3 tools/demo_model/experts_cut.py --waste build/bin/waste --out /tmp/cut

The checkpoint (models/demo-moe: 32 routed experts a layer, top 4, sigmoid
scores in 4 groups of which 2 are kept, renormalised, scaled by 2.5) is
converted once by `waste convert` (--expert-format F, --trunk-bits B; BF16R
with a 16-bit trunk by default, so that the cut is the only difference).
Then, in process:

- `waste eval --perplexity` over the first --windows windows of
  --window tokens of BOS + heldout.txt, with the trained top-k and with
  --experts-per-token N for each N from top_k - 1 down to 1: the
  perplexity, the mean over scored positions of KL(full top-k || cut) in
  nats, and how often both rank the same token first;
- `waste run --temp 0` on a few prompts (the start of held-out paragraphs)
  for --gen tokens, the generated ids read from --logits (the argmax of each
  row is the greedy choice): the first position where the cut's
  continuation leaves the full model's (none: it follows all the way).

Writes cut.json and cut.md to --out. Deterministic: one run is the figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKPOINT = os.path.join(HERE, "..", "..", "models", "demo-moe")
PROMPTS = [
    "CPython supports two different calling protocols:",
    "A call is made using a tuple for the positional arguments",
    "The signature of the slot is",
    "Instances of classes that set",
]


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--waste", required=True)
    ap.add_argument("--checkpoint", default=CHECKPOINT)
    ap.add_argument("--out", required=True)
    ap.add_argument("--expert-format", default="bf16")
    ap.add_argument("--trunk-bits", default="16")
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--gen", type=int, default=48)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    config = json.load(open(os.path.join(args.checkpoint, "config.json")))
    V, top_k = config["vocab_size"], config["num_experts_per_tok"]
    container = os.path.join(args.out, f"{args.expert_format}-t{args.trunk_bits}")
    if not os.path.exists(os.path.join(container, "manifest.json")):
        subprocess.run([args.waste, "convert", args.checkpoint, container, "--quiet",
                        "--expert-format", args.expert_format, "--trunk-bits", args.trunk_bits],
                       check=True)
    text = os.path.join(args.checkpoint, "heldout.txt")

    def cut_args(n):
        return [] if n == top_k else ["--experts-per-token", str(n)]

    def scored(n):
        logits = os.path.join(args.out, f"eval-{n}.bin")
        out = subprocess.run([args.waste, "eval", container, "--perplexity", text, "--window",
                              str(args.window), "--windows", str(args.windows), "--logits", logits,
                              "--local", "--json"] + cut_args(n),
                             check=True, capture_output=True, text=True).stdout
        lp = log_softmax(np.fromfile(logits, dtype=np.float32).reshape(-1, V))
        os.remove(logits)
        return json.loads(out), lp

    def greedy(n, prompt):
        logits = os.path.join(args.out, f"run-{n}.bin")
        subprocess.run([args.waste, "run", container, prompt, "-n", str(args.gen), "--temp", "0",
                        "--ignore-eos", "--logits", logits, "--local"] + cut_args(n),
                       check=True, capture_output=True)
        ids = np.fromfile(logits, dtype=np.float32).reshape(-1, V).argmax(-1).tolist()
        os.remove(logits)
        return ids

    full, full_lp = scored(top_k)
    # A window's last position predicts nothing that is scored.
    ends = np.zeros(len(full_lp), dtype=bool)
    ends[args.window - 1::args.window] = True
    ends[-1] = True
    keep = ~ends
    assert keep.sum() == full["scored"], (keep.sum(), full["scored"])
    full_greedy = [greedy(top_k, p) for p in PROMPTS]
    rows = [{"experts": top_k, "perplexity": full["perplexity"], "kl": 0.0, "top1": 1.0,
             "diverges_at": [None] * len(PROMPTS)}]
    for n in range(top_k - 1, 0, -1):
        got, lp = scored(n)
        p = np.exp(full_lp[keep])
        kl = float((p * (full_lp[keep] - lp[keep])).sum(-1).mean())
        top1 = float((full_lp[keep].argmax(-1) == lp[keep].argmax(-1)).mean())
        div = []
        for prompt, want in zip(PROMPTS, full_greedy):
            ids = greedy(n, prompt)
            div.append(next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), None))
        rows.append({"experts": n, "perplexity": got["perplexity"], "kl": kl, "top1": top1,
                     "diverges_at": div})
        print(f"top-{n}: perplexity {got['perplexity']:.4f} KL {kl:.5f} top-1 {top1:.4f} "
              f"greedy diverges at {div}", flush=True)
    result = {"container": os.path.basename(container), "window": args.window,
              "windows": full["windows"], "scored_tokens": full["scored"], "gen": args.gen,
              "prompts": PROMPTS, "rows": rows}
    with open(os.path.join(args.out, "cut.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "cut.md"), "w") as f:
        f.write("| experts per token | perplexity | vs top-%d | KL (nats/token) | same top-1 | "
                "greedy leaves the full model's at (of %d tokens, per prompt) |\n"
                "|---|---|---|---|---|---|\n" % (top_k, args.gen))
        for r in rows:
            div = ", ".join("-" if d is None else str(d) for d in r["diverges_at"])
            f.write(f"| {r['experts']} | {r['perplexity']:.4f} | "
                    f"{r['perplexity'] / rows[0]['perplexity'] - 1:+.2%} | {r['kl']:.5f} | "
                    f"{r['top1']:.2%} | {div} |\n")
    print(open(os.path.join(args.out, "cut.md")).read())


if __name__ == "__main__":
    main()
