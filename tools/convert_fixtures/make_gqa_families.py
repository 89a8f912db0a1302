#!/usr/bin/env python3
"""Writes the Qwen3-MoE and GLM-4.5 fixtures of convert_test (tests/fixtures/convert/).

    /work/pyenv/bin/python tools/convert_fixtures/make_gqa_families.py --out tests/fixtures/convert

Each family: a tiny random checkpoint written by transformers' own class
(save_pretrained, bf16, two shards and an index), and that model's float32
eager logits at every position of a 300-token prompt:

  qwen3-moe/: Qwen3MoeForCausalLM, 4 layers of which layer 1 is dense
    (mlp_only_layers), 16 experts with top-4 and norm_topk_prob, 4 query heads
    over 2 KV heads of head_dim 24 (hidden 64 / 4 heads would be 16), q/k
    norms, rope_theta 1e6.
  glm4-moe/: Glm4MoeForCausalLM, 4 layers of which the first is dense
    (first_k_dense_replace 1), 16 experts in 4 groups of which 2 are kept,
    top-4, a shared expert, a random e_score_correction_bias, 4 query heads
    over 2 KV heads of head_dim 24 with partial_rotary_factor 0.5,
    attention_bias, no q/k norm (as GLM-4.5 is released); and a
    multi-token-prediction layer (layer 4, num_nextn_predict_layers 1) added
    to the checkpoint under the released names, which waste convert skips.

Files: <family>/, <family>.logits.bin (float32 LE [300][vocab]) and
gqa_families.json (prompts, versions, logit scales, top-11 gaps).
Weights are rounded to bfloat16 before the logits are computed, so a
lossless conversion holds exactly the reference's weights.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file

SEED = 21
POSITIONS = 300
VOCAB = 320


def bf16_round_(model: torch.nn.Module):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
        for name, b in model.named_buffers():
            if b.is_floating_point() and "bias" in name:
                b.copy_(b.to(torch.bfloat16).float())


def top_gap(logits: torch.Tensor) -> float:
    s = logits.sort(-1, descending=True)[0][:, :11]
    return float((s[:, :-1] - s[:, 1:]).min())


def prompt() -> list[int]:
    g = torch.Generator().manual_seed(SEED)
    return torch.randint(0, VOCAB, (POSITIONS,), generator=g).tolist()


def save(model, out: str, name: str, ids: list[int], extra_tensors: dict | None = None) -> dict:
    bf16_round_(model)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(d, max_shard_size="400KB")
    if extra_tensors:  # a shard of their own, listed in the index
        file = "model-extra.safetensors"
        save_file(extra_tensors, os.path.join(d, file), metadata={"format": "pt"})
        index_path = os.path.join(d, "model.safetensors.index.json")
        with open(index_path) as f:
            index = json.load(f)
        index["weight_map"].update({n: file for n in extra_tensors})
        with open(index_path, "w") as f:
            json.dump(index, f, indent=1)
    logits.numpy().astype("<f4").tofile(os.path.join(out, name + ".logits.bin"))
    return {"checkpoint": name, "logits": name + ".logits.bin", "shape": [len(ids), VOCAB],
            "oracle": type(model).__name__ + " (float32, eager)",
            "max_abs_logit": float(logits.abs().max()), "min_top11_gap": top_gap(logits)}


def make_qwen3(out: str, ids: list[int]) -> dict:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(SEED)
    cfg = Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=16,
        num_hidden_layers=4, mlp_only_layers=[1], decoder_sparse_step=1, num_experts=16,
        num_experts_per_tok=4, norm_topk_prob=True, num_attention_heads=4, num_key_value_heads=2,
        head_dim=24, rms_norm_eps=1e-6, initializer_range=0.1, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        bos_token_id=None, eos_token_id=VOCAB - 1, pad_token_id=None,
        attn_implementation="eager", experts_implementation="eager")
    model = Qwen3MoeForCausalLM(cfg).float().eval()
    with torch.no_grad():  # norms away from 1, so that a missing norm shows
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(0.8 + 0.4 * torch.rand_like(p))
    return save(model, out, "qwen3-moe", ids)


def make_glm(out: str, ids: list[int]) -> dict:
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM

    torch.manual_seed(SEED)
    cfg = Glm4MoeConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=16,
        num_hidden_layers=4, first_k_dense_replace=1, n_routed_experts=16, num_experts_per_tok=4,
        n_shared_experts=1, n_group=4, topk_group=2, norm_topk_prob=True,
        routed_scaling_factor=2.5, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
        attention_bias=True, use_qk_norm=False, num_nextn_predict_layers=1,
        rms_norm_eps=1e-5, initializer_range=0.1, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5},
        bos_token_id=None, eos_token_id=VOCAB - 1, pad_token_id=None,
        attn_implementation="eager", experts_implementation="eager")
    model = Glm4MoeForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for L in range(cfg.first_k_dense_replace, cfg.num_hidden_layers):
            gate = model.model.layers[L].mlp.gate
            gate.e_score_correction_bias.copy_(torch.randn(cfg.n_routed_experts) * 0.3)
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(0.8 + 0.4 * torch.rand_like(p))
            elif n.endswith(".bias"):  # the attention biases: random, not zero
                p.copy_(torch.randn_like(p) * 0.3)
    # The multi-token-prediction layer as GLM-4.5 ships it (layer
    # num_hidden_layers; a few of its tensors suffice): transformers builds
    # none, so it is written beside the model's shards.
    h, p = cfg.hidden_size, f"model.layers.{cfg.num_hidden_layers}."
    g = torch.Generator().manual_seed(SEED)
    mtp = {p + "eh_proj.weight": torch.randn(h, 2 * h, generator=g),
           p + "enorm.weight": torch.ones(h), p + "hnorm.weight": torch.ones(h),
           p + "input_layernorm.weight": torch.ones(h),
           p + "shared_head.norm.weight": torch.ones(h)}
    mtp = {k: v.to(torch.bfloat16).contiguous() for k, v in mtp.items()}
    return save(model, out, "glm4-moe", ids, mtp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(2)
    os.makedirs(args.out, exist_ok=True)
    ids = prompt()
    meta = {"seed": SEED, "positions": POSITIONS, "prompt_ids": ids,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "cases": {"qwen3-moe": make_qwen3(args.out, ids), "glm4-moe": make_glm(args.out, ids)}}
    with open(os.path.join(args.out, "gqa_families.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta["cases"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
