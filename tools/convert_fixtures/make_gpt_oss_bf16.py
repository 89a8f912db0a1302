#!/usr/bin/env python3
"""Writes the GPT-OSS fine-tune fixture of gpt_oss_test
(tests/fixtures/convert/gpt-oss-bf16/).

    python3 tools/convert_fixtures/make_gpt_oss_bf16.py --out tests/fixtures/convert

A fine-tune's checkpoint as transformers writes it: GptOssForCausalLM on a
tiny random config (2 layers, sliding window 32 on layer 0, 4 experts top-2,
hidden 64 but expert width 32 so a transposed read cannot pass, attention
sinks, YaRN as released), cast to bfloat16 and saved by save_pretrained, no
quantization_config. Its experts are the parameters' own layout:

  model.layers.L.mlp.experts.gate_up_proj [E][hidden][2 * inter] BF16
    (gate the even columns, up the odd ones), gate_up_proj_bias [E][2 * inter]
  model.layers.L.mlp.experts.down_proj [E][inter][hidden], down_proj_bias [E][hidden]

The reference logits come from the checkpoint loaded back with
from_pretrained(dir, dtype=torch.float32) (eager attention), never from the
bf16 model, so RoPE's buffers are float32.

Files: gpt-oss-bf16/ (config.json, model.safetensors), gpt-oss-bf16.logits.bin
(float32 LE [positions][vocab]) and gpt-oss-bf16.json (prompt and versions).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import transformers
from safetensors import safe_open
from transformers import GptOssConfig, GptOssForCausalLM

SEED = 42
POSITIONS = 300


def config() -> GptOssConfig:
    return GptOssConfig(
        vocab_size=256, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=32,
        num_local_experts=4, num_experts_per_tok=2, rms_norm_eps=1e-5,
        max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 128},
        tie_word_embeddings=False, attention_bias=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(SEED)
    model = GptOssForCausalLM(config()).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                p.normal_(0.0, 0.1)
            elif name.endswith("sinks") or name.endswith("bias"):
                p.normal_(0.0, 0.5 if name.endswith("sinks") else 0.05)
            elif name == "lm_head.weight":  # logits far enough apart for a top-10 check
                p.normal_(0.0, 1.0)
    d = os.path.join(a.out, "gpt-oss-bf16")
    model.to(torch.bfloat16).save_pretrained(d)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        gu = f.get_slice("model.layers.0.mlp.experts.gate_up_proj")
        assert gu.get_shape() == [4, 64, 64] and gu.get_dtype() == "BF16", gu.get_shape()
        assert f.get_slice("model.layers.0.mlp.experts.down_proj").get_shape() == [4, 32, 64]
        assert not any(k.endswith("_blocks") for k in f.keys())

    ref = GptOssForCausalLM.from_pretrained(d, dtype=torch.float32,
                                            attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(SEED)
    prompt = [1] + torch.randint(3, 256, (POSITIONS - 1,), generator=g).tolist()
    with torch.no_grad():
        logits = ref(torch.tensor([prompt])).logits[0].float()
    logits.numpy().astype("<f4").tofile(os.path.join(a.out, "gpt-oss-bf16.logits.bin"))
    top = logits.sort(-1, descending=True).values
    gap = (top[:, :10] - top[:, 1:11]).min().item()
    meta = {"prompt": prompt, "positions": POSITIONS, "vocab": 256, "smallest_top11_gap": gap,
            "transformers": transformers.__version__, "torch": torch.__version__, "seed": SEED}
    with open(os.path.join(a.out, "gpt-oss-bf16.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"max |logit| {logits.abs().max().item():.3f}, smallest top-11 gap {gap:.2e}")


if __name__ == "__main__":
    main()
