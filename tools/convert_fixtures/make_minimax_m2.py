#!/usr/bin/env python3
"""Writes the MiniMax-M2 fixture of minimax_m2_test (tests/fixtures/convert/).

    python3 tools/convert_fixtures/make_minimax_m2.py --out tests/fixtures/convert

A tiny random checkpoint written by transformers' own MiniMaxM2ForCausalLM
(save_pretrained, bf16, two shards and an index, released tensor names:
block_sparse_moe.experts.E.w1/w2/w3, block_sparse_moe.e_score_correction_bias),
and the float32 eager logits of that checkpoint loaded back with
from_pretrained(dtype=torch.float32) at every position of a 300-token prompt:

  minimax-m2/: 4 layers, all MoE, 16 experts of 16 with top-4, sigmoid
    routing with a random e_score_correction_bias, 4 query heads over 2 KV
    heads of head_dim 24 of which 12 dims rotate (partial_rotary_factor 0.5),
    q and k RMSNormed across all heads (weights [96] and [48], away from 1),
    rope_theta 5e6; and a multi-token-prediction layer (layer 4) of a few
    tensors beside the shards, which waste convert skips and reports.

Files: minimax-m2/, minimax-m2.logits.bin (float32 LE [300][vocab]) and
minimax_m2.json (prompt, versions, logit scale, top-11 gap; the layout of
make_gqa_families.py's gqa_families.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file

SEED = 42
POSITIONS = 300
VOCAB = 320
NAME = "minimax-m2"


def top_gap(logits: torch.Tensor) -> float:
    s = logits.sort(-1, descending=True)[0][:, :11]
    return float((s[:, :-1] - s[:, 1:]).min())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import transformers
    from transformers import MiniMaxM2Config, MiniMaxM2ForCausalLM

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    cfg = MiniMaxM2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=16, num_hidden_layers=4,
        num_local_experts=16, num_experts_per_tok=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=24, rms_norm_eps=1e-6, initializer_range=0.1,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.5},
        bos_token_id=None, eos_token_id=VOCAB - 1, pad_token_id=None,
        attn_implementation="eager", experts_implementation="eager")
    model = MiniMaxM2ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.e_score_correction_bias.copy_(torch.randn(cfg.num_local_experts) * 0.3)
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):  # away from 1, so that a missing norm shows
                p.copy_(0.8 + 0.4 * torch.rand_like(p))
        # The checkpoint holds bf16: round first, so the saved weights are the model's.
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
        for n, b in model.named_buffers():
            if "bias" in n:
                b.copy_(b.to(torch.bfloat16).float())

    d = os.path.join(args.out, NAME)
    shutil.rmtree(d, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(d, max_shard_size="400KB")
    # A multi-token-prediction layer past num_hidden_layers (a few tensors
    # suffice; transformers builds none), in a shard of its own.
    h, pre = cfg.hidden_size, f"model.layers.{cfg.num_hidden_layers}."
    g = torch.Generator().manual_seed(SEED)
    mtp = {pre + "eh_proj.weight": torch.randn(h, 2 * h, generator=g),
           pre + "enorm.weight": torch.ones(h), pre + "hnorm.weight": torch.ones(h)}
    mtp = {k: v.to(torch.bfloat16).contiguous() for k, v in mtp.items()}
    save_file(mtp, os.path.join(d, "model-extra.safetensors"), metadata={"format": "pt"})
    index_path = os.path.join(d, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    index["weight_map"].update({n: "model-extra.safetensors" for n in mtp})
    with open(index_path, "w") as f:
        json.dump(index, f, indent=1)

    # The oracle: the saved checkpoint loaded back in float32 (its RoPE
    # buffers computed in float32, never cast).
    ref = MiniMaxM2ForCausalLM.from_pretrained(d, dtype=torch.float32,
                                               attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, VOCAB, (POSITIONS,), generator=gen).tolist()
    with torch.no_grad():
        logits = ref(input_ids=torch.tensor([ids])).logits[0].float()
    logits.numpy().astype("<f4").tofile(os.path.join(args.out, NAME + ".logits.bin"))
    case = {"checkpoint": NAME, "logits": NAME + ".logits.bin", "shape": [POSITIONS, VOCAB],
            "oracle": "MiniMaxM2ForCausalLM.from_pretrained(dtype=float32), eager",
            "max_abs_logit": float(logits.abs().max()), "min_top11_gap": top_gap(logits)}
    # gqa_families.json's layout, so that the same tests read either.
    meta = {"seed": SEED, "positions": POSITIONS, "prompt_ids": ids,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "cases": {NAME: case}}
    with open(os.path.join(args.out, "minimax_m2.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(case, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
