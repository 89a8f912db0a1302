#!/usr/bin/env python3
"""Writes a synthetic DeepSeek-V3-shaped checkpoint of a few GB for timing
`waste convert` (not committed; docs/log/2026-11-30-issues-6-to-9.md says how it was used).

    python3 tools/convert_fixtures/make_large.py OUT [--dtype bf16|fp8] [--layers 8]

Random normal weights (std 0.02), shards of about 1 GB with
model.safetensors.index.json, the published config keys. --dtype fp8 stores
every linear weight but the embedding, LM head and routers as F8_E4M3 with
float32 weight_scale_inv per 128 x 128 block, as DeepSeek-V3 ships them.
"""

import argparse
import json
import os

import torch
from safetensors.torch import save_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["bf16", "fp8"], default="bf16")
    ap.add_argument("--layers", type=int, default=8)
    a = ap.parse_args()
    h, inter, moe, E, vocab, heads = 2048, 4096, 512, 64, 32000, 16
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "vocab_size": vocab, "hidden_size": h, "intermediate_size": inter,
        "moe_intermediate_size": moe, "num_hidden_layers": a.layers, "first_k_dense_replace": 1,
        "n_routed_experts": E, "num_experts_per_tok": 8, "n_shared_experts": 1, "n_group": 8,
        "topk_group": 4, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid", "topk_method": "noaux_tc", "moe_layer_freq": 1,
        "num_attention_heads": heads, "num_key_value_heads": heads, "q_lora_rank": 768,
        "kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1,
        "torch_dtype": "bfloat16",
    }
    if a.dtype == "fp8":
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                      "activation_scheme": "dynamic",
                                      "weight_block_size": [128, 128]}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    g = torch.Generator().manual_seed(1)
    shard, shard_bytes, n, weight_map = {}, 0, 0, {}

    def flush():
        nonlocal shard, shard_bytes, n
        if not shard:
            return
        n += 1
        name = f"model-{n:05d}.safetensors"
        save_file(shard, os.path.join(a.out, name), metadata={"format": "pt"})
        weight_map.update({k: name for k in shard})
        shard, shard_bytes = {}, 0

    def put(name, t):
        nonlocal shard_bytes
        shard[name] = t.contiguous()
        shard_bytes += t.numel() * t.element_size()
        if shard_bytes > 1 << 30:
            flush()

    def linear(name, rows, cols, quantize=True):
        w = torch.randn(rows, cols, generator=g) * 0.02
        if a.dtype == "fp8" and quantize:
            br, bc = -(-rows // 128), -(-cols // 128)
            s = torch.full((br, bc), 0.02 / 64)
            put(name, (w / s.repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]).clamp(-448, 448).to(torch.float8_e4m3fn))
            put(name + "_scale_inv", s)
        else:
            put(name, w.to(torch.bfloat16))

    def norm(name, n_):
        put(name, torch.ones(n_, dtype=torch.bfloat16))

    linear("model.embed_tokens.weight", vocab, h, False)
    for L in range(a.layers):
        p = f"model.layers.{L}."
        norm(p + "input_layernorm.weight", h)
        norm(p + "post_attention_layernorm.weight", h)
        at = p + "self_attn."
        linear(at + "q_a_proj.weight", 768, h)
        norm(at + "q_a_layernorm.weight", 768)
        linear(at + "q_b_proj.weight", heads * 96, 768)
        linear(at + "kv_a_proj_with_mqa.weight", 256 + 32, h)
        norm(at + "kv_a_layernorm.weight", 256)
        linear(at + "kv_b_proj.weight", heads * 128, 256)
        linear(at + "o_proj.weight", h, heads * 64)
        if L == 0:
            linear(p + "mlp.gate_proj.weight", inter, h)
            linear(p + "mlp.up_proj.weight", inter, h)
            linear(p + "mlp.down_proj.weight", h, inter)
            continue
        put(p + "mlp.gate.weight", (torch.randn(E, h, generator=g) * 0.02).to(torch.bfloat16))
        put(p + "mlp.gate.e_score_correction_bias", torch.zeros(E))
        for e in range(E):
            linear(p + f"mlp.experts.{e}.gate_proj.weight", moe, h)
            linear(p + f"mlp.experts.{e}.up_proj.weight", moe, h)
            linear(p + f"mlp.experts.{e}.down_proj.weight", h, moe)
        linear(p + "mlp.shared_experts.gate_proj.weight", moe, h)
        linear(p + "mlp.shared_experts.up_proj.weight", moe, h)
        linear(p + "mlp.shared_experts.down_proj.weight", h, moe)
    norm("model.norm.weight", h)
    linear("lm_head.weight", vocab, h, False)
    flush()
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


if __name__ == "__main__":
    main()
