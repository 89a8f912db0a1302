#!/usr/bin/env python3
"""Writes the Qwen3.5 MoE fixture of qwen3_5_moe_test (tests/fixtures/convert/qwen3.5-moe/).

    python3 tools/convert_fixtures/make_qwen3_5_moe.py --out tests/fixtures/convert

transformers' own Qwen3_5MoeForConditionalGeneration (the class of the
released checkpoints: a multimodal wrapper whose text_config is the language
model) on a tiny random config: 4 text layers, full attention on layers 1
and 3 (gated GQA, 4 query heads over 2 KV heads, q/k RMSNorm, partial rotary
0.25 of a 32-wide head, multimodal rotary with mrope_section [2, 1, 1]),
Gated DeltaNet with separate in_proj_qkv / z / b / a on the others (2 key
heads of 16 serving 4 value heads of 16), every layer MoE (16 experts,
top-4, softmax, always renormalized) with a sigmoid-gated shared expert; a
one-block vision tower (model.visual.*) that waste leaves out. Every
parameter is random (the norms' zero-centered weights too) and rounded to
bfloat16; save_pretrained writes the bf16 checkpoint. The reference logits
come from the checkpoint loaded back with from_pretrained(dtype=float32)
(never a cast model: the rotary's buffers stay float32).

qwen3.5-moe.logits.bin: float32 LE [T][vocab], the logits at every position
of the prompt in qwen3.5-moe.json, text only (transformers gives every token
the same temporal, height and width position). The json records that for
such positions the multimodal rotary is plain RoPE (max |cos, sin
difference| against rotate-half RoPE over the same inverse frequencies, and
the model's logits with plain RoPE in the rotary's place).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

from hf_models import block_fla  # noqa: E402

block_fla()  # transformers must take its PyTorch path on a CPU

import torch  # noqa: E402

SEED = 35
POSITIONS = 300
VOCAB = 256
NAME = "qwen3.5-moe"


def top_gap(logits: torch.Tensor) -> float:
    s = logits.sort(-1, descending=True)[0][:, :11]
    return float((s[:, :-1] - s[:, 1:]).min())


def plain_rope_gap(rotary, positions: int) -> float:
    """max |difference| of Qwen3.5's multimodal cos/sin at text positions
    (all three rows equal) and plain rotate-half RoPE's."""
    pos = torch.arange(positions)[None, :]
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = rotary(x, pos[None].expand(3, 1, -1))
    freqs = pos[..., None].float() * rotary.inv_freq.float()
    emb = torch.cat((freqs, freqs), dim=-1)
    return float(max((cos - emb.cos()).abs().max(), (sin - emb.sin()).abs().max()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import transformers
    from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration

    torch.manual_seed(SEED)
    text = dict(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4,
        num_experts=16, num_experts_per_tok=4, moe_intermediate_size=16,
        shared_expert_intermediate_size=32,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                         "mrope_interleaved": True},
        rms_norm_eps=1e-6, initializer_range=0.1, tie_word_embeddings=False,
        bos_token_id=0, eos_token_id=1, pad_token_id=None)
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=2,
                  temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64,
                  num_position_embeddings=16)
    cfg = Qwen3_5MoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=False,
                           image_token_id=250, video_token_id=251, vision_start_token_id=252,
                           vision_end_token_id=253)
    model = Qwen3_5MoeForConditionalGeneration(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "visual" in name:
                continue
            if name.endswith("norm.weight") and "linear_attn" not in name:
                p.copy_(torch.randn_like(p) * 0.2)  # zero-centered: the norm scales by 1 + w
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(1 + torch.randn_like(p) * 0.2)
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn_like(p) * 0.5)
            elif name.endswith("conv1d.weight"):
                p.copy_(torch.rand_like(p) - 0.5)
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn_like(p))
            elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                p.copy_(torch.randn_like(p) * 0.1)
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())

    d = os.path.join(args.out, NAME)
    shutil.rmtree(d, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(d, max_shard_size="400KB")
    del model
    model = Qwen3_5MoeForConditionalGeneration.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager").eval()

    g = torch.Generator().manual_seed(SEED)
    prompt = [0] + torch.randint(2, 250, (POSITIONS - 1,), generator=g).tolist()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
        rotary = model.model.language_model.rotary_emb
        rope_gap = plain_rope_gap(rotary, POSITIONS)
        # The whole model again with plain RoPE in place of the recomposition
        # (every frequency from the temporal row).
        rotary.recomposition_frequencies = lambda f: torch.cat((f[0], f[0]), dim=-1)
        plain = model(input_ids=ids).logits[0].float()

    logits.numpy().astype("<f4").tofile(os.path.join(args.out, NAME + ".logits.bin"))
    meta = {
        "oracle": "transformers " + transformers.__version__ +
                  " Qwen3_5MoeForConditionalGeneration.from_pretrained(dtype=float32), eager,"
                  " whole prompt at once, text only",
        "maker": "tools/convert_fixtures/make_qwen3_5_moe.py",
        "prompt_ids": prompt,
        "logits": {"file": NAME + ".logits.bin", "dtype": "float32-le",
                   "shape": [POSITIONS, VOCAB], "rows": "every prompt position"},
        "argmax": [int(i) for i in logits.argmax(-1)],
        "max_abs_logit": float(logits.abs().max()),
        "min_top11_gap": top_gap(logits),
        "text_positions_make_mrope_plain_rope": {
            "max_abs_cos_sin_difference_vs_rotate_half_rope": rope_gap,
            "max_abs_logit_difference_plain_rope_model_vs_multimodal": float(
                (plain - logits).abs().max()),
        },
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    with open(os.path.join(args.out, NAME + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(json.dumps({k: meta[k] for k in ("max_abs_logit", "min_top11_gap",
                                           "text_positions_make_mrope_plain_rope")}, indent=1))


if __name__ == "__main__":
    main()
