#!/usr/bin/env python3
"""Writes the GLM-4.7-Flash and dots.llm1 fixtures of glm_lite_dots_test (tests/fixtures/convert/).

    python3 tools/convert_fixtures/make_glm_lite_dots.py --out tests/fixtures/convert

Each family: a tiny random checkpoint written by transformers' own class
(save_pretrained, bf16, shards and an index), and that model loaded back with
from_pretrained(dtype=float32): its eager logits at every position of a
300-token prompt are the reference.

  glm4-moe-lite/: Glm4MoeLiteForCausalLM (GLM-4.7-Flash), 4 layers whose
    mlp_layer_types are dense, sparse, dense, sparse (transformers reads this
    list, not first_k_dense_replace); MLA with q_lora_rank 32, kv_lora_rank
    32, nope 16 + rope 8 query/key dims, v_head_dim 16, interleaved rotary;
    16 experts in 4 groups of which 2 are kept, top-4, a shared expert, a
    random e_score_correction_bias, routed_scaling_factor 1.8; and a
    multi-token-prediction layer (layer 4) under the released names, which
    waste convert skips.
  dots1/: Dots1ForCausalLM (dots.llm1), 4 layers of which the first is dense
    (first_k_dense_replace 1); GQA, 4 query heads over 2 KV heads of head_dim
    24 with q/k norms; 16 experts in 4 groups of which 2 are kept, top-4, two
    shared experts, a random e_score_correction_bias; full attention
    everywhere (max_window_layers = num_hidden_layers, as released).

Files: <family>/, <family>.logits.bin (float32 LE [300][vocab]) and
glm_lite_dots.json (prompt, versions, logit scales, top-11 gaps).
Weights are rounded to bfloat16 before saving, so a lossless conversion
holds exactly the reference's weights.
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


def top_gap(logits: torch.Tensor) -> float:
    s = logits.sort(-1, descending=True)[0][:, :11]
    return float((s[:, :-1] - s[:, 1:]).min())


def prompt() -> list[int]:
    g = torch.Generator().manual_seed(SEED)
    return torch.randint(0, VOCAB, (POSITIONS,), generator=g).tolist()


def randomize_(model, cfg, first_moe: list[int]):
    """Norms away from 1 and correction biases away from 0, so that a missing one shows."""
    with torch.no_grad():
        for L in first_moe:
            model.model.layers[L].mlp.gate.e_score_correction_bias.copy_(
                torch.randn(cfg.n_routed_experts) * 0.3)
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(0.8 + 0.4 * torch.rand_like(p))


def bf16_round_(model: torch.nn.Module):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
        for name, b in model.named_buffers():
            if b.is_floating_point() and "bias" in name:
                b.copy_(b.to(torch.bfloat16).float())


def save(model, out: str, name: str, ids: list[int], extra_tensors: dict | None = None) -> dict:
    cls = type(model)
    bf16_round_(model)
    with torch.no_grad():  # to check that the load below left nothing out
        own = model(input_ids=torch.tensor([ids])).logits[0].float()
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
    # The oracle: the saved checkpoint loaded back in float32 (its
    # non-persistent buffers, RoPE's frequencies, computed in float32).
    ref = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                              experts_implementation="eager").eval()
    with torch.no_grad():
        logits = ref(input_ids=torch.tensor([ids])).logits[0].float()
    drift = float((logits - own).abs().max() / logits.abs().max())
    if drift > 1e-6:
        raise SystemExit(f"{name}: the loaded model's logits differ from the saved one's by {drift}")
    logits.numpy().astype("<f4").tofile(os.path.join(out, name + ".logits.bin"))
    return {"checkpoint": name, "logits": name + ".logits.bin", "shape": [len(ids), VOCAB],
            "oracle": cls.__name__ + ".from_pretrained(dtype=float32), eager",
            "max_abs_logit": float(logits.abs().max()), "min_top11_gap": top_gap(logits)}


def make_glm_lite(out: str, ids: list[int]) -> dict:
    from transformers import Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM

    torch.manual_seed(SEED)
    cfg = Glm4MoeLiteConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=16,
        num_hidden_layers=4, mlp_layer_types=["dense", "sparse", "dense", "sparse"],
        n_routed_experts=16, num_experts_per_tok=4, n_shared_experts=1, n_group=4, topk_group=2,
        norm_topk_prob=True, routed_scaling_factor=1.8, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=16, rope_interleave=True, attention_bias=False,
        num_nextn_predict_layers=1, rms_norm_eps=1e-5, initializer_range=0.1,
        tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        bos_token_id=None, eos_token_id=VOCAB - 1, pad_token_id=None,
        attn_implementation="eager", experts_implementation="eager")
    model = Glm4MoeLiteForCausalLM(cfg).float().eval()
    randomize_(model, cfg, [1, 3])
    # The multi-token-prediction layer as GLM-4.7-Flash ships it (layer
    # num_hidden_layers; a few of its tensors suffice): transformers builds none.
    h, p = cfg.hidden_size, f"model.layers.{cfg.num_hidden_layers}."
    g = torch.Generator().manual_seed(SEED)
    mtp = {p + "eh_proj.weight": torch.randn(h, 2 * h, generator=g),
           p + "enorm.weight": torch.ones(h), p + "hnorm.weight": torch.ones(h),
           p + "input_layernorm.weight": torch.ones(h),
           p + "shared_head.norm.weight": torch.ones(h)}
    mtp = {k: v.to(torch.bfloat16).contiguous() for k, v in mtp.items()}
    return save(model, out, "glm4-moe-lite", ids, mtp)


def make_dots1(out: str, ids: list[int]) -> dict:
    from transformers import Dots1Config, Dots1ForCausalLM

    torch.manual_seed(SEED)
    cfg = Dots1Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=16,
        num_hidden_layers=4, first_k_dense_replace=1, n_routed_experts=16, num_experts_per_tok=4,
        n_shared_experts=2, n_group=4, topk_group=2, norm_topk_prob=True,
        routed_scaling_factor=2.5, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
        attention_bias=False, sliding_window=None, max_window_layers=4,
        rms_norm_eps=1e-5, initializer_range=0.1, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7},
        bos_token_id=None, eos_token_id=VOCAB - 1, pad_token_id=None,
        attn_implementation="eager", experts_implementation="eager")
    model = Dots1ForCausalLM(cfg).float().eval()
    randomize_(model, cfg, [1, 2, 3])
    return save(model, out, "dots1", ids)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    ids = prompt()
    meta = {"seed": SEED, "positions": POSITIONS, "prompt_ids": ids,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "cases": {"glm4-moe-lite": make_glm_lite(args.out, ids),
                      "dots1": make_dots1(args.out, ids)}}
    with open(os.path.join(args.out, "glm_lite_dots.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta["cases"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
