#!/usr/bin/env python3
"""Writes the Kimi K2.5 fixture of kimi_k25_test (tests/fixtures/convert/kimi-k25/).

    python3 tools/convert_fixtures/make_kimi_k25.py --out tests/fixtures/convert

transformers' own Kimi_K25ForConditionalGeneration on a tiny random config:
its text model DeepSeek-V3's (text_config model_type kimi_k2, which the
config class reads as deepseek_v3; 3 layers, the first dense, 8 routed
experts top-2 in 2 groups of which 1 is chosen, one shared expert, MLA with
q_lora_rank, YaRN), a one-block vision tower and its projector. Cast to
bfloat16 and saved by save_pretrained, then renamed to the release's layout
(transformers 5.25 writes the text layers as language_model.model.blocks.L
and the projector's norm as model.mm_projector.*; the release has
language_model.model.layers.L and mm_projector.*), plus one tensor of a
multi-token-prediction layer (language_model.model.layers.3.*) as the release
carries. Experts are BF16 (the release's are INT4 compressed-tensors, which
waste convert refuses by name).

The reference logits come from that directory loaded back with
from_pretrained(dir, dtype=torch.float32) (no missing or unexpected tensors
but the MTP one, every text weight equal to the saved one), text only.

Files: kimi-k25/ (config.json, model.safetensors), kimi-k25.logits.bin
(float32 LE [positions][vocab]) and kimi-k25.json (prompt and versions).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import Kimi_K25Config, Kimi_K25ForConditionalGeneration

SEED = 25
POSITIONS = 300
VOCAB = 256


def config() -> Kimi_K25Config:
    text = dict(
        model_type="kimi_k2", vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
        moe_intermediate_size=32, num_hidden_layers=3, first_k_dense_replace=1,
        n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, n_group=2, topk_group=1,
        norm_topk_prob=True, routed_scaling_factor=2.5, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=16, initializer_range=0.1, num_nextn_predict_layers=1,
        rope_parameters={"rope_type": "yarn", "rope_theta": 50000.0, "factor": 4.0,
                         "original_max_position_embeddings": 128, "beta_fast": 32.0,
                         "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        bos_token_id=1, eos_token_id=2, pad_token_id=None, tie_word_embeddings=False)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  patch_size=4, pos_emb_height=4, pos_emb_width=4, pos_emb_time=2)
    return Kimi_K25Config(text_config=text, vision_config=vision, projection_hidden_size=32,
                          tie_word_embeddings=False)


def released_name(name: str) -> str:
    name = name.replace("language_model.model.blocks.", "language_model.model.layers.")
    return name.replace("model.mm_projector.", "mm_projector.", 1) if name.startswith(
        "model.mm_projector.") else name


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(SEED)
    cfg = config()
    model = Kimi_K25ForConditionalGeneration(cfg).eval()
    lm = model.model.language_model
    with torch.no_grad():
        for layer in lm.layers[cfg.text_config.first_k_dense_replace:]:
            layer.mlp.gate.e_score_correction_bias.copy_(torch.randn(8) * 0.3)
        model.lm_head.weight.normal_(0.0, 1.0)  # logits far enough apart for a top-10 check

    d = os.path.join(a.out, "kimi-k25")
    model.to(torch.bfloat16).save_pretrained(d)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    path = os.path.join(d, "model.safetensors")
    tensors = {released_name(k): v for k, v in load_file(path).items()}
    assert "language_model.model.layers.1.mlp.experts.7.down_proj.weight" in tensors
    assert "language_model.lm_head.weight" in tensors and "mm_projector.pre_norm.weight" in tensors
    mtp = "language_model.model.layers.3.enorm.weight"
    tensors[mtp] = torch.ones(64, dtype=torch.bfloat16)
    save_file(tensors, path, metadata={"format": "pt"})

    ref, info = Kimi_K25ForConditionalGeneration.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    ref.eval()
    assert not info["missing_keys"], info["missing_keys"]
    assert not [k for k in info["unexpected_keys"] if "layers.3." not in k], info
    saved = {k: v.float() for k, v in tensors.items()}
    for name, p in ref.model.language_model.named_parameters():
        pre = "language_model.model." + name.rsplit(".", 1)[0]
        if name.endswith("experts.gate_up_proj"):  # [E][2 * inter][hidden], gate first
            want = torch.stack([torch.cat([saved[f"{pre}.{e}.gate_proj.weight"],
                                           saved[f"{pre}.{e}.up_proj.weight"]]) for e in range(8)])
        elif name.endswith("experts.down_proj"):
            want = torch.stack([saved[f"{pre}.{e}.down_proj.weight"] for e in range(8)])
        else:
            want = saved["language_model.model." + name]
        assert torch.equal(p.detach(), want), name
    assert torch.equal(ref.lm_head.weight.detach(), saved["language_model.lm_head.weight"])

    g = torch.Generator().manual_seed(SEED)
    prompt = [1] + torch.randint(3, VOCAB, (POSITIONS - 1,), generator=g).tolist()
    with torch.no_grad():
        logits = ref(input_ids=torch.tensor([prompt])).logits[0].float()
    logits.numpy().astype("<f4").tofile(os.path.join(a.out, "kimi-k25.logits.bin"))
    top = logits.sort(-1, descending=True).values
    gap = (top[:, :10] - top[:, 1:11]).min().item()
    meta = {"prompt": prompt, "positions": POSITIONS, "vocab": VOCAB, "smallest_top11_gap": gap,
            "transformers": transformers.__version__, "torch": torch.__version__, "seed": SEED}
    with open(os.path.join(a.out, "kimi-k25.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"max |logit| {logits.abs().max().item():.3f}, smallest top-11 gap {gap:.2e}")


if __name__ == "__main__":
    main()
