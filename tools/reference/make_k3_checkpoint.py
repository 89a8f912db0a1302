#!/usr/bin/env python3
"""Writes a tiny random Kimi K3 checkpoint in the released Hugging Face layout.

    /work/pyenv/bin/python tools/reference/make_k3_checkpoint.py --out DIR [--seed 3]

Same seed, same bytes. The layout is the release's as WARP's docs/K3.md and
tools/convert.py read it:

  config.json      KimiK3ForConditionalGeneration with the text model nested
                   under text_config (its own architectures still say
                   KimiLinearForCausalLM), a vision_config, and a
                   compressed-tensors quantization_config (mxfp4-pack-quantized,
                   group 32) that covers only the routed experts
  language_model.model.layers.L.block_sparse_moe.experts.E.{w1,w3,w2}.
                   weight_packed U8 [out, in/2] (two E2M1 codes a byte, low
                   nibble first) and weight_scale U8 [out, in/32] (E8M0)
  everything else of the text model BF16 under language_model. (the router's
                   e_score_correction_bias, A_log and dt_bias F32), the latent
                   projections, the latent norm and the shared experts included
  vision_tower.* / mm_projector.*: a few BF16 tensors outside the prefix, which
                   a text-only converter must skip (they are not a working tower)
  tiktoken.model, tokenizer_config.json: the tiny Kimi vocabulary of
                   tests/fixtures/convert/kimi-linear (280 ids, 7 specials)

The shape is K3's in miniature: 5 layers, layer 0 dense, KDA on layers 0, 1
and 3 and MLA on 2 and 4 (kda_layers is 1-based), Attention Residual blocks of
2 layers (blocks start at layers 0, 2 and 4), 16 routed experts top-4 on a
32-wide latent of the 64-wide hidden state, 2 shared experts, sigmoid routing
with one group and routed_scaling_factor 1.0, SiTU, KDA's full-rank output gate
g_proj and bounded decay (gate_lower_bound -5), A_log padded to head_dim with
zeros past the heads (as K3 ships it), MLA with q_lora, NoPE and its sigmoid
output gate. Two choices are not the release's, on purpose: the SiTU betas are
1.5 and 3.0 (the released 4 and 25 would leave tanh in its linear range on
random weights, and SiTU would be indistinguishable from SiLU), and the
Attention-Residual pseudo-queries are random (the release trains them; zero
would make every mix uniform).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "convert_fixtures"))
from make_gpt_oss import quantize_mxfp4  # noqa: E402  (one E2M1 encoder for the project)

TOKENIZER_DIR = os.path.join(ROOT, "tests", "fixtures", "convert", "kimi-linear")
PREFIX = "language_model."
FFN_GAIN = 1.5  # gate/up weights: pre-activations of a unit or two, where SiTU's tanh bends
PSEUDO_QUERY = 0.25  # std of the Attention-Residual pseudo-queries (res_proj)


def text_config() -> dict:
    return {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "vocab_size": 280,
        "hidden_size": 64,
        "intermediate_size": 64,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 5,
        "first_k_dense_replace": 1,
        "num_experts": 16,
        "num_experts_per_token": 4,
        "num_shared_experts": 2,
        "moe_renormalize": True,
        "moe_router_activation_func": "sigmoid",
        "routed_scaling_factor": 1.0,
        "use_grouped_topk": True,
        "num_expert_group": 1,
        "topk_group": 1,
        "moe_layer_freq": 1,
        "routed_expert_hidden_size": 32,
        "latent_moe_use_norm": True,
        "attn_res_block_size": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 24,
        "q_lora_rank": 32,
        "kv_lora_rank": 32,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "mla_use_nope": True,
        "mla_use_output_gate": True,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "linear_attn_config": {
            "num_heads": 2,
            "head_dim": 16,
            "short_conv_kernel_size": 4,
            "kda_layers": [1, 2, 4],
            "full_attn_layers": [3, 5],
            "use_full_rank_gate": True,
            "gate_lower_bound": -5.0,
        },
        "rms_norm_eps": 1e-05,
        "hidden_act": "situ",
        "activation_situ_beta": 1.5,
        "activation_situ_linear_beta": 3.0,
        "tie_word_embeddings": False,
        "num_nextn_predict_layers": 0,
        "bos_token_id": 273,
        "eos_token_id": 275,
        "pad_token_id": None,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "model_max_length": 4096,
    }


def config() -> dict:
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "model_type": "kimi_k3",
        "text_config": text_config(),
        "vision_config": {"model_type": "kimi_k3_vision", "patch_size": 14,
                          "vt_hidden_size": 8, "vt_num_hidden_layers": 1,
                          "vt_num_attention_heads": 1, "vt_intermediate_size": 16,
                          "merge_kernel_size": [2, 2], "text_hidden_size": 64},
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "mxfp4-pack-quantized",
            "config_groups": {"group_0": {
                "targets": ["re:.*block_sparse_moe\\.experts\\.\\d+\\.w[123]$"],
                "weights": {"num_bits": 4, "type": "float", "group_size": 32,
                            "strategy": "group", "symmetric": True}}},
            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                       "re:.*routed_expert_(down|up)_proj$", "re:vision_tower.*",
                       "re:mm_projector.*"],
        },
        "torch_dtype": "bfloat16",
    }


def tensors(cfg: dict, g: torch.Generator) -> tuple[dict, dict]:
    """(the checkpoint's tensors by name, the float32 values every engine
    should see: bf16-rounded trunk, MXFP4-decoded experts, by the same names
    with the experts under ...weight)."""
    h, L, E, I = (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_experts"],
                  cfg["moe_intermediate_size"])
    lat = cfg["routed_expert_hidden_size"]
    lac = cfg["linear_attn_config"]
    H, D, K = lac["num_heads"], lac["head_dim"], lac["short_conv_kernel_size"]
    C = H * D
    nh, nope, rope, vd = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"],
                          cfg["qk_rope_head_dim"], cfg["v_head_dim"])
    ql, kl = cfg["q_lora_rank"], cfg["kv_lora_rank"]
    out, ref = {}, {}

    def put(name, t, dtype=torch.bfloat16):
        out[PREFIX + name] = t.to(dtype).contiguous()
        ref[PREFIX + name] = out[PREFIX + name].float()

    def mat(name, rows, cols, gain=1.0):
        put(name, (torch.rand(rows, cols, generator=g) * 2 - 1) * gain * (3.0 / cols) ** 0.5)

    def norm(name, n):
        put(name, 0.9 + 0.2 * torch.rand(n, generator=g))

    def expert_mat(name, rows, cols, gain):
        w = (torch.rand(rows, cols, generator=g) * 2 - 1) * gain * (3.0 / cols) ** 0.5
        blocks, scales, deq = quantize_mxfp4(w)
        out[PREFIX + name + ".weight_packed"] = blocks.reshape(rows, cols // 2).contiguous()
        out[PREFIX + name + ".weight_scale"] = scales.contiguous()
        ref[PREFIX + name + ".weight"] = deq

    put("model.embed_tokens.weight", torch.rand(cfg["vocab_size"], h, generator=g) * 2 - 1)
    for layer in range(L):
        p = f"model.layers.{layer}."
        a = p + "self_attn."
        norm(p + "input_layernorm.weight", h)
        norm(p + "post_attention_layernorm.weight", h)
        for r in ("self_attention_res", "mlp_res"):
            norm(p + f"{r}_norm.weight", h)
            put(p + f"{r}_proj.weight", torch.randn(h, generator=g) * PSEUDO_QUERY)
        if layer + 1 in lac["kda_layers"]:
            for n in "qkv":
                mat(a + f"{n}_proj.weight", C, h)
                put(a + f"{n}_conv1d.weight", torch.rand(C, 1, K, generator=g) - 0.5)
            mat(a + "b_proj.weight", H, h)
            mat(a + "f_a_proj.weight", D, h)
            mat(a + "f_b_proj.weight", C, D, 2.0)
            mat(a + "g_proj.weight", C, h)
            mat(a + "o_proj.weight", h, C, 0.5)
            A = torch.zeros(1, 1, D, 1)  # one per head, padded to head_dim with zeros
            A[0, 0, :H, 0] = torch.log(0.2 + 1.5 * torch.rand(H, generator=g))
            put(a + "A_log", A, torch.float32)
            put(a + "dt_bias", torch.rand(C, generator=g) * 2 - 1, torch.float32)
            norm(a + "o_norm.weight", D)
        else:
            mat(a + "q_a_proj.weight", ql, h)
            norm(a + "q_a_layernorm.weight", ql)
            mat(a + "q_b_proj.weight", nh * (nope + rope), ql)
            mat(a + "kv_a_proj_with_mqa.weight", kl + rope, h)
            norm(a + "kv_a_layernorm.weight", kl)
            mat(a + "kv_b_proj.weight", nh * (nope + vd), kl)
            mat(a + "g_proj.weight", nh * vd, h)
            mat(a + "o_proj.weight", h, nh * vd, 0.5)
        if layer >= cfg["first_k_dense_replace"]:
            m = p + "block_sparse_moe."
            mat(m + "gate.weight", E, h, 2.0)
            put(m + "gate.e_score_correction_bias", torch.randn(E, generator=g) * 0.1,
                torch.float32)
            mat(m + "routed_expert_down_proj.weight", lat, h)
            norm(m + "routed_expert_norm.weight", lat)
            mat(m + "routed_expert_up_proj.weight", h, lat, 0.5)
            for e in range(E):
                expert_mat(m + f"experts.{e}.w1", I, lat, FFN_GAIN)
                expert_mat(m + f"experts.{e}.w3", I, lat, FFN_GAIN)
                expert_mat(m + f"experts.{e}.w2", lat, I, 1.0)
            S = I * cfg["num_shared_experts"]
            mat(m + "shared_experts.gate_proj.weight", S, h, FFN_GAIN)
            mat(m + "shared_experts.up_proj.weight", S, h, FFN_GAIN)
            mat(m + "shared_experts.down_proj.weight", h, S, 0.5)
        else:
            mat(p + "mlp.gate_proj.weight", cfg["intermediate_size"], h, FFN_GAIN)
            mat(p + "mlp.up_proj.weight", cfg["intermediate_size"], h, FFN_GAIN)
            mat(p + "mlp.down_proj.weight", h, cfg["intermediate_size"], 0.5)
    norm("model.norm.weight", h)
    norm("model.output_attn_res_norm.weight", h)
    put("model.output_attn_res_proj.weight", torch.randn(h, generator=g) * PSEUDO_QUERY)
    mat("lm_head.weight", cfg["vocab_size"], h)
    # The vision tower's and projector's names, outside the text prefix.
    for name, shape in (("vision_tower.patch_embed.proj.weight", (8, 3, 14, 14)),
                        ("vision_tower.patch_embed.proj.bias", (8,)),
                        ("vision_tower.encoder.final_layernorm.weight", (8,)),
                        ("mm_projector.proj.0.weight", (32, 32)),
                        ("mm_projector.proj.2.weight", (64, 32))):
        out[name] = (torch.randn(*shape, generator=g) * 0.1).to(torch.bfloat16)
    return out, ref


def write(out_dir: str, seed: int) -> dict:
    cfg = config()
    g = torch.Generator().manual_seed(seed)
    t, _ = tensors(cfg["text_config"], g)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    # Two shards and an index, as released (96 shards there); experts in the second.
    first = sorted(n for n in t if ".experts." not in n)
    second = sorted(n for n in t if ".experts." in n)
    weight_map = {}
    for file, part in (("model-00001-of-00002.safetensors", first),
                       ("model-00002-of-00002.safetensors", second)):
        save_file({n: t[n] for n in part}, os.path.join(out_dir, file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.numel() * v.element_size() for v in t.values())},
                   "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    for name in ("tiktoken.model", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(TOKENIZER_DIR, name), os.path.join(out_dir, name))
    return cfg


def reference_weights(seed: int) -> dict:
    """The float32 weights of the checkpoint `seed` writes (experts decoded)."""
    _, ref = tensors(config()["text_config"], torch.Generator().manual_seed(seed))
    return ref


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    write(a.out, a.seed)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
