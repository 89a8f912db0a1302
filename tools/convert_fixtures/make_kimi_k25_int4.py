#!/usr/bin/env python3
"""Writes the INT4 Kimi K2.5 fixtures of kimi_k25_test and int4_test.

    python3 tools/convert_fixtures/make_kimi_k25_int4.py --out tests/fixtures/convert \\
        --kernel-out tests/fixtures/int4

make_kimi_k25.py's tiny model (same config and seed), its routed experts
stored as the release stores them: compressed-tensors' pack-quantized INT4
(weight_packed I32 [out, in / 8], weight_scale BF16 [out, in / 32],
weight_shape I64 [2]; symmetric, groups of 32), packed by compressed-tensors'
own PackedQuantizationCompressor from scales its calculate_qparams chose,
rounded to bf16 as the release's are. config.json carries the release's
quantization_config (config_groups, ignore list of the BF16 modules).

The reference: transformers 5.25 does not run compressed-tensors INT4 on
CPU, so the experts are dequantized by compressed-tensors' own decompress
(with the scale widened to float32, so each weight is the exact product
code * scale that waste computes with, not that product rounded to bf16),
written with the rest of the weights as a float32 checkpoint in a scratch
directory, and that directory loaded with
Kimi_K25ForConditionalGeneration.from_pretrained(dir, dtype=torch.float32).

Files: kimi-k25-int4/ (config.json, model.safetensors),
kimi-k25-int4.logits.bin (float32 LE [positions][vocab]), kimi-k25-int4.json
(prompt and versions); with --kernel-out, int4/ holding one random matrix
[16][128]: packed.bin (the I32 weight_packed's bytes), scales.bin (BF16
weight_scale's bytes) and dequant.bin (compressed-tensors' decompress with a
float32 scale, float32 LE [16][128]).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import compressed_tensors
import torch
import transformers
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
from compressed_tensors.quantization.utils import calculate_qparams
from safetensors.torch import load_file, save_file
from transformers import Kimi_K25ForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_kimi_k25 import SEED, VOCAB, config, released_name  # noqa: E402

POSITIONS = 64
GROUP = 32
ARGS = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group",
                        group_size=GROUP)
SCHEME = QuantizationScheme(targets=["Linear"], weights=ARGS)


def quantization_config() -> dict:
    """The release's: every Linear INT4 but those the ignore list names."""
    return {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "quantization_status": "compressed", "kv_cache_scheme": None,
        "config_groups": {"group_0": {
            "targets": ["Linear"], "input_activations": None, "output_activations": None,
            "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                        "group_size": GROUP, "dynamic": False, "actorder": None,
                        "observer": "minmax", "observer_kwargs": {}, "block_structure": None}}},
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                   "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:vision_tower.*",
                   "re:mm_projector.*"],
    }


def pack(w: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """compressed-tensors' compressed tensors of `w` [out, in], and its
    decompress of them with the scale in float32 (the exact weights)."""
    g = w.float().reshape(w.shape[0], -1, GROUP)
    scale, zp = calculate_qparams(g.amin(-1), g.amax(-1), ARGS)
    scale = scale.to(torch.bfloat16)
    packed = PackedQuantizationCompressor.compress(
        {"weight": w.float(), "weight_scale": scale.float(), "weight_zero_point": zp}, SCHEME)
    packed["weight_scale"] = scale
    assert set(packed) == {"weight_packed", "weight_scale", "weight_shape"}, set(packed)
    exact = PackedQuantizationCompressor.decompress(
        {**packed, "weight_scale": scale.float()}, SCHEME)["weight"]
    assert exact.dtype == torch.float32
    return packed, exact


def kernel_fixture(out: str) -> None:
    torch.manual_seed(SEED + 1)
    w = torch.randn(16, 128) * torch.rand(16, 4).repeat_interleave(GROUP, 1)
    packed, exact = pack(w)
    assert packed["weight_packed"].shape == (16, 16) and packed["weight_packed"].dtype == torch.int32
    os.makedirs(out, exist_ok=True)
    packed["weight_packed"].numpy().astype("<i4").tofile(os.path.join(out, "packed.bin"))
    packed["weight_scale"].view(torch.int16).numpy().astype("<i2").tofile(
        os.path.join(out, "scales.bin"))
    exact.numpy().astype("<f4").tofile(os.path.join(out, "dequant.bin"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--kernel-out")
    a = ap.parse_args()
    if a.kernel_out:
        kernel_fixture(a.kernel_out)
    torch.manual_seed(SEED)
    cfg = config()
    model = Kimi_K25ForConditionalGeneration(cfg).eval()
    lm = model.model.language_model
    with torch.no_grad():
        for layer in lm.layers[cfg.text_config.first_k_dense_replace:]:
            layer.mlp.gate.e_score_correction_bias.copy_(torch.randn(8) * 0.3)
        model.lm_head.weight.normal_(0.0, 1.0)  # logits far enough apart for a top-10 check

    d = os.path.join(a.out, "kimi-k25-int4")
    model.to(torch.bfloat16).save_pretrained(d)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    path = os.path.join(d, "model.safetensors")
    tensors = {released_name(k): v for k, v in load_file(path).items()}
    exact = {}  # the float32 reference weights
    for name in list(tensors):
        if ".mlp.experts." in name and name.endswith("_proj.weight"):
            packed, exact[name] = pack(tensors.pop(name))
            base = name[: -len("weight")]
            for k, v in packed.items():
                tensors[base + k] = v.contiguous()
    assert len(exact) == 2 * 8 * 3, len(exact)
    tensors["language_model.model.layers.3.enorm.weight"] = torch.ones(64, dtype=torch.bfloat16)
    save_file(tensors, path, metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        cj = json.load(f)
    cj["quantization_config"] = quantization_config()
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cj, f, indent=2)

    with tempfile.TemporaryDirectory() as ref_dir:
        model.save_pretrained(ref_dir)  # the config; the weights are replaced below
        ref_path = os.path.join(ref_dir, "model.safetensors")
        saved = load_file(ref_path)
        full = {}
        for k, v in saved.items():
            name = released_name(k)
            full[k] = exact[name] if name in exact else tensors[name].float()
        save_file(full, ref_path, metadata={"format": "pt"})
        ref, info = Kimi_K25ForConditionalGeneration.from_pretrained(
            ref_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
        ref.eval()
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        for name, p in ref.model.language_model.named_parameters():
            pre = "language_model.model." + name.rsplit(".", 1)[0]
            if name.endswith("experts.gate_up_proj"):  # [E][2 * inter][hidden], gate first
                want = torch.stack([torch.cat([exact[f"{pre}.{e}.gate_proj.weight"],
                                               exact[f"{pre}.{e}.up_proj.weight"]])
                                    for e in range(8)])
            elif name.endswith("experts.down_proj"):
                want = torch.stack([exact[f"{pre}.{e}.down_proj.weight"] for e in range(8)])
            else:
                want = tensors["language_model.model." + name].float()
            assert torch.equal(p.detach(), want), name

        g = torch.Generator().manual_seed(SEED)
        prompt = [1] + torch.randint(3, VOCAB, (POSITIONS - 1,), generator=g).tolist()
        with torch.no_grad():
            logits = ref(input_ids=torch.tensor([prompt])).logits[0].float()
    logits.numpy().astype("<f4").tofile(os.path.join(a.out, "kimi-k25-int4.logits.bin"))
    top = logits.sort(-1, descending=True).values
    gap = (top[:, :10] - top[:, 1:11]).min().item()
    meta = {"prompt": prompt, "positions": POSITIONS, "vocab": VOCAB, "smallest_top11_gap": gap,
            "transformers": transformers.__version__, "torch": torch.__version__,
            "compressed_tensors": compressed_tensors.__version__, "seed": SEED}
    with open(os.path.join(a.out, "kimi-k25-int4.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"max |logit| {logits.abs().max().item():.3f}, smallest top-11 gap {gap:.2e}")


if __name__ == "__main__":
    main()
