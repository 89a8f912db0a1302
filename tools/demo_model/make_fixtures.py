#!/usr/bin/env python3
"""Writes tests/fixtures/demo/: what demo_model_test compares waste with.

    python3 tools/demo_model/make_fixtures.py --out tests/fixtures/demo

Everything comes from the committed checkpoint (models/demo-moe) through
transformers' DeepseekV3ForCausalLM (float32 on the bf16 weights, eager
attention) and Hugging Face `tokenizers`:

- demo.json "tokenize": the first TOKENIZE_CHARS characters of heldout.txt
  and `tokenizers`' ids for them.
- demo.json "logits" + demo.logits.bin: float32 [LOGIT_TOKENS][vocab], the
  logits at every position of BOS + the first held-out tokens, with each
  row's gap between its 10th and 11th logit (the top-10 check's distance
  from a tie).
- demo.json "greedy": PROMPT's ids and PyTorch's greedy continuation of
  GREEDY_TOKENS (each step the whole sequence again, no cache), with the
  smallest gap between the best and the second-best logit on the way.
- demo.json "perplexity": PyTorch's mean NLL over the first PPL_WINDOWS
  windows of PPL_WINDOW tokens of BOS + heldout.txt, windowed as
  engine/model/perplexity.h does.
"""

from __future__ import annotations

import argparse
import json
import math
import os

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import DeepseekV3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKPOINT = os.path.join(HERE, "..", "..", "models", "demo-moe")
PROMPT = "The list data type has some more methods. Here are all of the methods of list objects:"
TOKENIZE_CHARS = 6000
LOGIT_TOKENS = 128
GREEDY_TOKENS = 40
PPL_WINDOW = 256
PPL_WINDOWS = 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", default=CHECKPOINT)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(args.out, exist_ok=True)
    tok = Tokenizer.from_file(os.path.join(args.checkpoint, "tokenizer.json"))
    config = json.load(open(os.path.join(args.checkpoint, "config.json")))
    bos = config["bos_token_id"]
    text = open(os.path.join(args.checkpoint, "heldout.txt"), encoding="utf-8").read()
    model = DeepseekV3ForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32,
                                                  attn_implementation="eager").eval()

    def logits_of(ids):
        with torch.no_grad():
            return model(input_ids=torch.tensor([ids])).logits[0].numpy()

    fx = {"checkpoint": "models/demo-moe"}
    piece = text[:TOKENIZE_CHARS]
    fx["tokenize"] = {"text": piece, "ids": tok.encode(piece, add_special_tokens=False).ids}

    all_ids = [bos] + tok.encode(text, add_special_tokens=False).ids
    prompt = all_ids[:LOGIT_TOKENS]
    logits = logits_of(prompt).astype(np.float32)
    logits.tofile(os.path.join(args.out, "demo.logits.bin"))
    gaps = [float(np.sort(row)[::-1][9] - np.sort(row)[::-1][10]) for row in logits]
    fx["logits"] = {"file": "demo.logits.bin", "prompt_ids": prompt, "vocab": config["vocab_size"],
                    "smallest_top10_gap": min(gaps)}

    ids = [bos] + tok.encode(PROMPT, add_special_tokens=False).ids
    start = len(ids)
    margin = math.inf
    for _ in range(GREEDY_TOKENS):
        row = logits_of(ids)[-1]
        top2 = np.sort(row)[::-1][:2]
        margin = min(margin, float(top2[0] - top2[1]))
        ids.append(int(row.argmax()))
    fx["greedy"] = {"prompt": PROMPT, "prompt_ids": ids[:start], "continuation_ids": ids[start:],
                    "continuation_text": tok.decode(ids[start:]), "smallest_margin": margin}

    nll, n = 0.0, 0
    for w in range(PPL_WINDOWS):
        win = all_ids[w * PPL_WINDOW:(w + 1) * PPL_WINDOW]
        lp = torch.log_softmax(torch.tensor(logits_of(win), dtype=torch.float64), dim=-1).numpy()
        nll -= sum(lp[t, win[t + 1]] for t in range(len(win) - 1))
        n += len(win) - 1
    fx["perplexity"] = {"window": PPL_WINDOW, "windows": PPL_WINDOWS, "scored": n, "mean_nll": nll / n,
                        "perplexity": math.exp(nll / n)}
    with open(os.path.join(args.out, "demo.json"), "w") as f:
        json.dump(fx, f, indent=1, ensure_ascii=False)
    print(json.dumps({k: v for k, v in fx["greedy"].items() if k != "prompt_ids"}, ensure_ascii=False))
    print(json.dumps(fx["perplexity"]), "smallest top-10 gap", fx["logits"]["smallest_top10_gap"])


if __name__ == "__main__":
    main()
