#!/usr/bin/env python3
"""Writes the GPT-OSS fixture of gpt_oss_test (tests/fixtures/convert/gpt-oss/).

    /work/pyenv/bin/python tools/convert_fixtures/make_gpt_oss.py --out tests/fixtures/convert

transformers' own GptOssForCausalLM on a tiny random config (4 layers,
sliding window 32 on alternate layers, 8 experts top-2, GQA 4 query heads
over 2 KV heads, attention sinks, YaRN as released: factor 32, truncate
false), its checkpoint written in the released layout:

  model.layers.L.mlp.experts.{gate_up_proj,down_proj}_{blocks,scales}: MXFP4,
    blocks U8 [E][rows][cols/32][16] (two E2M1 codes a byte, low nibble
    first), scales U8 [E][rows][cols/32] (E8M0), rows the output channels
    (gate_up: gate the even rows, up the odd ones)
  *_bias, the router, attention (with sinks), norms, embedding, lm_head: BF16
  config.json with quantization_config {quant_method: mxfp4}

The random experts are quantized to MXFP4 here, every other weight is
rounded to bfloat16, and the model's weights are set to exactly those
values before its logits are computed (float32, eager), so a lossless
conversion holds the reference's weights. transformers' own MXFP4 decoder (integrations/mxfp4.py's convert_moe_packed_tensors, which
from_pretrained uses) is checked to give back exactly the model's experts
from the written blocks and scales, which confirms the layout.

Files: gpt-oss/ (config.json, model.safetensors) and gpt-oss.logits.bin,
float32 LE [positions][vocab], with gpt-oss.json (prompt and versions).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import transformers
from safetensors.torch import save_file
from transformers import GptOssConfig, GptOssForCausalLM
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

SEED = 21
POSITIONS = 288
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def config() -> GptOssConfig:
    return GptOssConfig(
        vocab_size=320, hidden_size=64, intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=32,
        num_local_experts=8, num_experts_per_tok=2, rms_norm_eps=1e-5,
        max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 128},
        tie_word_embeddings=False, attention_bias=True)


def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w [..., rows, cols] float -> blocks U8 [..., rows, cols/32, 16], scales U8
    [..., rows, cols/32], and the dequantized values (float32)."""
    *lead, rows, cols = w.shape
    x = w.reshape(*lead, rows, cols // 32, 32).float()
    amax = x.abs().amax(-1, keepdim=True).clamp_min(2.0 ** -60)
    e = torch.ceil(torch.log2(amax / 6.0))  # amax / 2^e <= 6, E2M1's largest
    q = x / torch.exp2(e)
    mags = E2M1[:8]
    idx = (q.abs().unsqueeze(-1) - mags).abs().argmin(-1)  # nearest magnitude
    code = idx + 8 * (q < 0).long()
    deq = (E2M1[code] * torch.exp2(e)).reshape(*lead, rows, cols)
    code = code.to(torch.uint8)
    blocks = (code[..., 0::2] | (code[..., 1::2] << 4)).contiguous()
    scales = (e.squeeze(-1) + 127).to(torch.uint8).contiguous()
    return blocks, scales, deq


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(SEED)
    cfg = config()
    cfg._attn_implementation = "eager"
    model = GptOssForCausalLM(cfg).float().eval()
    tensors = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                # transformers holds [E][in][out]; the checkpoint's rows are the outputs
                p.normal_(0.0, 0.05)
                blocks, scales, deq = quantize_mxfp4(p.transpose(1, 2))
                p.copy_(deq.transpose(1, 2))
                tensors[name + "_blocks"] = blocks
                tensors[name + "_scales"] = scales
            else:
                if name.endswith("sinks") or name.endswith("bias"):
                    p.normal_(0.0, 0.5 if name.endswith("sinks") else 0.05)
                if name == "lm_head.weight":  # logits far enough apart for a top-10 check
                    p.normal_(0.0, 1.0)
                p.copy_(p.to(torch.bfloat16).float())
                tensors[name] = p.detach().to(torch.bfloat16).contiguous()
    g = torch.Generator().manual_seed(SEED)
    prompt = [cfg.bos_token_id] + torch.randint(3, cfg.vocab_size, (POSITIONS - 1,),
                                                generator=g).tolist()
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float()

    d = os.path.join(a.out, "gpt-oss")
    os.makedirs(d, exist_ok=True)
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cj = cfg.to_dict()
    cj["architectures"] = ["GptOssForCausalLM"]
    cj["quantization_config"] = {"quant_method": "mxfp4",
                                 "modules_to_not_convert": ["model.layers.*.self_attn",
                                                            "model.layers.*.mlp.router",
                                                            "model.embed_tokens", "lm_head"]}
    for k in ("_attn_implementation", "_name_or_path", "transformers_version", "dtype",
              "output_router_logits", "router_aux_loss_coef"):
        cj.pop(k, None)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cj, f, indent=1, sort_keys=True)
    logits.numpy().astype("<f4").tofile(os.path.join(a.out, "gpt-oss.logits.bin"))

    # The written layout decoded by transformers' own MXFP4 loader function
    # (integrations/mxfp4.py, what from_pretrained uses to dequantize; the
    # whole from_pretrained path needs accelerate) must give the weights the
    # logits were computed with.
    for name, p in model.named_parameters():
        if name + "_blocks" in tensors:
            back = convert_moe_packed_tensors(tensors[name + "_blocks"], tensors[name + "_scales"],
                                              dtype=torch.float32)
            assert torch.equal(back, p.detach()), name
    top = logits.sort(-1, descending=True).values
    gap = (top[:, :10] - top[:, 1:11]).min().item()
    meta = {"prompt": prompt, "positions": POSITIONS, "vocab": cfg.vocab_size,
            "smallest_top11_gap": gap,
            "transformers": transformers.__version__, "torch": torch.__version__, "seed": SEED}
    with open(os.path.join(a.out, "gpt-oss.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"max |logit| {logits.abs().max().item():.3f}, smallest top-11 gap {gap:.2e}")


if __name__ == "__main__":
    main()
