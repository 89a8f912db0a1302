#!/usr/bin/env python3
"""Writes the fixtures of `waste convert` (tests/fixtures/convert/).

    python3 tools/convert_fixtures/make_fixtures.py --out tests/fixtures/convert

1. deepseek-v3/: a tiny random DeepSeek-V3 checkpoint written by transformers'
   own DeepseekV3ForCausalLM.save_pretrained (bf16 shards of at most 200 KB
   with model.safetensors.index.json, transformers 5's config.json with
   rope_parameters / YaRN), first_k_dense_replace 1, n_group 4 > 1 with
   topk_group 2 so grouped routing is exercised, a random
   e_score_correction_bias; a small byte-level BPE tokenizer.json with
   DeepSeek's special tokens. deepseek-v3.logits.bin: float32 [T][vocab],
   the logits of that same transformers model (float32, eager) for every
   position of deepseek-v3.json's prompt.
2. kimi-linear/: a tiny random Kimi-Linear checkpoint with Moonshot's
   published tensor names (block_sparse_moe.experts.E.w1/w2/w3, q/k/v_conv1d,
   A_log, f_a_proj, ...) and config keys, bf16, a tiktoken.model and
   tokenizer_config.json. kimi-linear.logits.bin: the logits of
   tools/reference/reference_model.py on those weights, cross-checked
   against transformers' KimiLinearForCausalLM.from_pretrained of the same
   directory (recorded in kimi-linear.json).
3. dequant.json: every FP8 E4M3 code, every E2M1 nibble and every E8M0
   code decoded by PyTorch (float8_e4m3fn, float8_e8m0fnu and
   compressed-tensors' E2M1 table), plus small block-scaled FP8 and MXFP4
   tensors and their float32 dequantization, as the converter must decode
   them.

Weights are rounded to bfloat16 before the reference logits are computed,
so a lossless (BF16) conversion holds exactly the reference's weights.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

from hf_models import block_fla  # noqa: E402

block_fla()  # transformers' Kimi-Linear must take its PyTorch path on a CPU

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

SEED = 7
PROMPT = [1, 17, 101, 211, 40, 42, 187, 5, 133, 128, 250, 64]


def bf16_round_(model: torch.nn.Module):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
        for name, b in model.named_buffers():
            if b.is_floating_point() and "bias" in name:
                b.copy_(b.to(torch.bfloat16).float())


def byte_chars() -> dict:
    """GPT-2's byte-to-character map (byte-level BPE alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 256
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(extra)
            extra += 1
    return chars


def deepseek_tokenizer(vocab_size: int) -> dict:
    bc = byte_chars()
    vocab = {bc[b]: b for b in range(256)}
    merges = []
    for word in [" the", " and", "ing", " of", "er"]:
        cur = bc[ord(word[0])]
        for ch in word[1:]:
            nxt = cur + bc[ord(ch)]
            if nxt not in vocab:
                merges.append(f"{cur} {bc[ord(ch)]}")
                vocab[nxt] = len(vocab)
            cur = nxt
    specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"]
    assert len(vocab) + len(specials) <= vocab_size
    added = [{"id": len(vocab) + i, "content": s, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True} for i, s in enumerate(specials)]
    return {"version": "1.0", "added_tokens": added,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                      "vocab": vocab, "merges": merges}}


def make_deepseek(out: str) -> dict:
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(SEED)
    vocab = 288
    tok = deepseek_tokenizer(vocab)
    bos, eos = tok["added_tokens"][0]["id"], tok["added_tokens"][1]["id"]
    prompt = [bos] + PROMPT[1:]
    cfg = DeepseekV3Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=3, first_k_dense_replace=1, n_routed_experts=16, num_experts_per_tok=4,
        n_shared_experts=1, n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=48, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, initializer_range=0.2,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 64, "beta_fast": 32.0, "beta_slow": 1.0,
                         "mscale": 1.0, "mscale_all_dim": 1.0},
        bos_token_id=bos, eos_token_id=eos, pad_token_id=None,
        attn_implementation="eager", experts_implementation="eager")
    model = DeepseekV3ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for L in range(cfg.first_k_dense_replace, cfg.num_hidden_layers):
            gate = model.model.layers[L].mlp.gate
            gate.e_score_correction_bias.copy_(torch.randn(cfg.n_routed_experts) * 0.3)
    bf16_round_(model)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0].float()
    d = os.path.join(out, "deepseek-v3")
    shutil.rmtree(d, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(d, max_shard_size="200KB")
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    logits.numpy().astype("<f4").tofile(os.path.join(out, "deepseek-v3.logits.bin"))
    return {"prompt_ids": prompt, "oracle": "transformers DeepseekV3ForCausalLM (float32, eager)",
            "min_top11_gap": top_gap(logits),
            "logits": {"file": "deepseek-v3.logits.bin", "dtype": "float32-le",
                       "shape": [len(PROMPT), vocab], "rows": "every prompt position"},
            "argmax": [int(i) for i in logits.argmax(-1)],
            "max_abs_logit": float(logits.abs().max())}


def top_gap(logits: torch.Tensor) -> float:
    """Smallest gap between neighbours among each row's 11 largest logits:
    how far the top-10 comparison is from a tie."""
    s = logits.sort(-1, descending=True)[0][:, :11]
    return float((s[:, :-1] - s[:, 1:]).min())


# ------------------------------------------------------------- Kimi-Linear ---

KIMI_SPECIALS = ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>",
                 "<|im_middle|>"]


def kimi_config(vocab: int) -> dict:
    return {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
        "num_hidden_layers": 4, "first_k_dense_replace": 1, "num_experts": 8,
        "num_experts_per_token": 2, "num_shared_experts": 1, "moe_renormalize": True,
        "moe_router_activation_func": "sigmoid", "routed_scaling_factor": 2.446,
        "use_grouped_topk": True, "num_expert_group": 1, "topk_group": 1, "moe_layer_freq": 1,
        "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 24, "q_lora_rank": None,
        "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
        "mla_use_nope": True, "rope_theta": 10000.0, "rope_scaling": None,
        "linear_attn_config": {"num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4,
                               "kda_layers": [1, 2, 4], "full_attn_layers": [3]},
        "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False,
        "bos_token_id": vocab - len(KIMI_SPECIALS), "eos_token_id": vocab - len(KIMI_SPECIALS) + 2,
        "pad_token_id": None, "torch_dtype": "bfloat16", "use_cache": True,
        "initializer_range": 0.02, "model_max_length": 4096,
    }


def kimi_tensors(cfg: dict, g: torch.Generator) -> dict:
    h, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    lac = cfg["linear_attn_config"]
    H, D, K = lac["num_heads"], lac["head_dim"], lac["short_conv_kernel_size"]
    C = H * D
    E, I = cfg["num_experts"], cfg["moe_intermediate_size"]
    nh, nope, rope, vd, lat = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"],
                               cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"])
    t = {}

    def mat(name, rows, cols, gain=1.0):
        t[name] = (torch.rand(rows, cols, generator=g) * 2 - 1) * gain * (3.0 / cols) ** 0.5

    def norm(name, n):
        t[name] = 0.9 + 0.2 * torch.rand(n, generator=g)

    t["model.embed_tokens.weight"] = torch.rand(cfg["vocab_size"], h, generator=g) * 2 - 1
    for layer in range(L):
        p = f"model.layers.{layer}."
        a = p + "self_attn."
        norm(p + "input_layernorm.weight", h)
        norm(p + "post_attention_layernorm.weight", h)
        if layer + 1 in lac["kda_layers"]:
            for n in "qkv":
                mat(a + f"{n}_proj.weight", C, h)
                t[a + f"{n}_conv1d.weight"] = torch.rand(C, 1, K, generator=g) - 0.5
            mat(a + "b_proj.weight", H, h)
            mat(a + "f_a_proj.weight", D, h)
            mat(a + "f_b_proj.weight", C, D)
            mat(a + "g_a_proj.weight", D, h)
            mat(a + "g_b_proj.weight", C, D)
            mat(a + "o_proj.weight", h, C, 0.5)
            t[a + "A_log"] = torch.log(1 + 15 * torch.rand(1, 1, H, 1, generator=g))
            t[a + "dt_bias"] = torch.rand(C, generator=g) * 2 - 1
            norm(a + "o_norm.weight", D)
        else:
            mat(a + "q_proj.weight", nh * (nope + rope), h)
            mat(a + "kv_a_proj_with_mqa.weight", lat + rope, h)
            norm(a + "kv_a_layernorm.weight", lat)
            mat(a + "kv_b_proj.weight", nh * (nope + vd), lat)
            mat(a + "o_proj.weight", h, nh * vd, 0.5)
        if layer >= cfg["first_k_dense_replace"]:
            m = p + "block_sparse_moe."
            mat(m + "gate.weight", E, h)
            t[m + "gate.e_score_correction_bias"] = torch.randn(E, generator=g) * 0.3
            for e in range(E):
                mat(m + f"experts.{e}.w1.weight", I, h)
                mat(m + f"experts.{e}.w3.weight", I, h)
                mat(m + f"experts.{e}.w2.weight", h, I, 0.5)
            S = I * cfg["num_shared_experts"]
            mat(m + "shared_experts.gate_proj.weight", S, h)
            mat(m + "shared_experts.up_proj.weight", S, h)
            mat(m + "shared_experts.down_proj.weight", h, S, 0.5)
        else:
            mat(p + "mlp.gate_proj.weight", cfg["intermediate_size"], h)
            mat(p + "mlp.up_proj.weight", cfg["intermediate_size"], h)
            mat(p + "mlp.down_proj.weight", h, cfg["intermediate_size"], 0.5)
    norm("model.norm.weight", h)
    mat("lm_head.weight", cfg["vocab_size"], h)
    return {k: v.to(torch.bfloat16).contiguous() for k, v in t.items()}


class CheckpointAsContainer:
    """The interface tools/reference/reference_model.py reads, over a
    Kimi-Linear state dict with Moonshot's published names."""

    def __init__(self, cfg: dict, tensors: dict):
        self.config = cfg
        self.t = tensors

    def cfg(self, *keys, default=None):
        for k in keys:
            if self.config.get(k) is not None:
                return self.config[k]
        return default

    def has(self, name: str) -> bool:
        return name in self.t

    def tensor(self, name: str) -> np.ndarray:
        return self.t[name].float().numpy()

    def expert(self, layer: int, e: int) -> dict:
        p = f"model.layers.{layer}.block_sparse_moe.experts.{e}."
        return {k: self.t[p + w + ".weight"].float().numpy()
                for k, w in (("gate", "w1"), ("up", "w3"), ("down", "w2"))}


def make_kimi(out: str) -> dict:
    from reference_model import ReferenceModel

    vocab = 280
    cfg = kimi_config(vocab)
    g = torch.Generator().manual_seed(SEED)
    tensors = kimi_tensors(cfg, g)
    d = os.path.join(out, "kimi-linear")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    # Two shards and an index, as the published checkpoint has (20 shards there).
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half],
              "model-00002-of-00002.safetensors": names[half:]}
    weight_map = {}
    for file, part in shards.items():
        save_file({n: tensors[n] for n in part}, os.path.join(d, file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.numel() * 2 for v in tensors.values())},
                   "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    # tiktoken ranks: the 256 bytes and a few merges; specials after them.
    ranks = [bytes([b]) for b in range(256)]
    for w in [b" the", b" and", b"ing"]:
        for n in range(2, len(w) + 1):
            if w[:n] not in ranks:
                ranks.append(w[:n])
    first_special = vocab - len(KIMI_SPECIALS)
    assert len(ranks) <= first_special
    while len(ranks) < first_special:  # unused ranks up to the specials, as Kimi's reserved ids
        ranks.append(b"<r%d>" % len(ranks))
    with open(os.path.join(d, "tiktoken.model"), "w") as f:
        for i, tok in enumerate(ranks):
            f.write(f"{base64.b64encode(tok).decode()} {i}\n")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"added_tokens_decoder": {str(first_special + i): {"content": s, "special": True}
                                            for i, s in enumerate(KIMI_SPECIALS)},
                   "tokenizer_class": "TikTokenTokenizer"}, f, indent=1)

    ref = ReferenceModel(CheckpointAsContainer(cfg, tensors))
    prompt = [cfg["bos_token_id"]] + PROMPT[1:]
    logits = ref.forward(prompt, ref.new_state())
    logits.numpy().astype("<f4").tofile(os.path.join(out, "kimi-linear.logits.bin"))
    cross = {}
    try:
        from transformers import KimiLinearForCausalLM

        hf = KimiLinearForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                   attn_implementation="eager").eval()
        with torch.no_grad():
            hl = hf(input_ids=torch.tensor([prompt])).logits[0].float()
        cross = {"implementation": "transformers KimiLinearForCausalLM.from_pretrained(dir)",
                 "max_abs_diff": float((hl - logits).abs().max()),
                 "same_argmax": bool((hl.argmax(-1) == logits.argmax(-1)).all())}
    except Exception as e:  # recorded, not hidden
        cross = {"implementation": "transformers KimiLinearForCausalLM", "error": repr(e)[:300]}
    return {"prompt_ids": prompt, "oracle": "tools/reference/reference_model.py (float32)",
            "cross_check": cross,
            "min_top11_gap": top_gap(logits),
            "logits": {"file": "kimi-linear.logits.bin", "dtype": "float32-le",
                       "shape": [len(prompt), vocab], "rows": "every prompt position"},
            "argmax": [int(i) for i in logits.argmax(-1)],
            "max_abs_logit": float(logits.abs().max())}


# ----------------------------------------------------------------- decoders ---

def make_dequant(out: str) -> None:
    codes = torch.arange(256, dtype=torch.uint8)
    fp8 = codes.view(torch.float8_e4m3fn).float()
    e8m0 = codes.view(torch.float8_e8m0fnu).float()
    e2m1_table = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # compressed-tensors' kE2M1ToFloat
    e2m1 = [(-1.0 if n & 8 else 1.0) * e2m1_table[n & 7] for n in range(16)]

    def enc(values):  # JSON has no NaN: write it as null
        return [None if v != v else v for v in (float(x) for x in values)]

    g = torch.Generator().manual_seed(SEED)
    # A 40 x 72 FP8 weight with 16 x 32 blocks: ragged last blocks in both directions.
    w8 = torch.randint(0, 256, (40, 72), generator=g, dtype=torch.uint8)
    w8[w8 == 0x7F] = 0x10  # no NaN codes in the tensor (the converter refuses them)
    w8[w8 == 0xFF] = 0x90
    s8 = torch.rand(3, 3, generator=g) * 0.01
    deq8 = w8.view(torch.float8_e4m3fn).float() * s8.repeat_interleave(16, 0)[:40].repeat_interleave(32, 1)[:, :72]
    # A 6 x 64 MXFP4 weight: 2 scales per row.
    packed = torch.randint(0, 256, (6, 32), generator=g, dtype=torch.uint8)
    sc = torch.randint(110, 140, (6, 2), generator=g, dtype=torch.uint8)
    lo, hi = packed & 15, packed >> 4
    nib = torch.stack([lo, hi], -1).reshape(6, 64)
    vals = torch.tensor(e2m1)[nib.long()]
    deq4 = vals * sc.view(torch.float8_e8m0fnu).float().repeat_interleave(32, 1)
    doc = {
        "note": "written by tools/convert_fixtures/make_fixtures.py with torch " + torch.__version__,
        "fp8_e4m3fn": enc(fp8), "e8m0": enc(e8m0), "e2m1": e2m1,
        "fp8_block": {"rows": 40, "cols": 72, "block": [16, 32], "codes": w8.flatten().tolist(),
                      "scale_inv": s8.flatten().tolist(), "expected": deq8.flatten().tolist()},
        "mxfp4": {"rows": 6, "cols": 64, "packed": packed.flatten().tolist(),
                  "scales": sc.flatten().tolist(), "expected": deq4.flatten().tolist()},
    }
    with open(os.path.join(out, "dequant.json"), "w") as f:
        json.dump(doc, f)
    # The same two tensors as a checkpoint, so the converter's reader decodes them from files.
    d = os.path.join(out, "quantized")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    save_file({"fp8.weight": w8.view(torch.float8_e4m3fn), "fp8.weight_scale_inv": s8,
               "mx.weight_packed": packed, "mx.weight_scale": sc},
              os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "test", "quantization_config": {"weight_block_size": [16, 32]}}, f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    meta = {"seed": SEED, "versions": {"torch": torch.__version__,
                                       "transformers": transformers.__version__}}
    meta["deepseek-v3"] = make_deepseek(args.out)
    meta["kimi-linear"] = make_kimi(args.out)
    make_dequant(args.out)
    with open(os.path.join(args.out, "fixtures.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps({k: (v if k != "versions" else v) for k, v in meta.items()}, indent=1)[:3000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
