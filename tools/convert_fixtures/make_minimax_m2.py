#!/usr/bin/env python3
"""Writes the MiniMax-M2 fixture of minimax_m2_test (tests/fixtures/convert/).

    python3 tools/convert_fixtures/make_minimax_m2.py --out tests/fixtures/convert

A tiny random checkpoint written by transformers' own MiniMaxM2ForCausalLM
(save_pretrained, bf16, two shards and an index, released tensor names:
block_sparse_moe.experts.E.w1/w2/w3, block_sparse_moe.e_score_correction_bias),
and the float32 eager logits of that checkpoint loaded back with
from_pretrained(dtype=torch.float32) at every position of a 300-token prompt:

  minimax-m2/: 4 layers, all MoE, 16 experts of 16 with top-4, sigmoid
    routing with a random e_score_correction_bias, 4 query heads over 2 KV
    heads of head_dim 24 of which 12 dims rotate (partial_rotary_factor 0.5),
    q and k RMSNormed across all heads (weights [96] and [48], away from 1),
    rope_theta 5e6; and a multi-token-prediction layer (layer 4) of a few
    tensors beside the shards, which waste convert skips and reports. The
    attention projections and experts lie on FP8's grid (power-of-two
    scales per 32x32 block).
  minimax-m2-fp8/: the same weights in the released FP8 layout (F8_E4M3 with
    a float32 weight_scale_inv per block, quantization_config's
    weight_block_size [32, 32]; router, norms, embedding and head BF16), one
    shard: the same values exactly, so the same logits.

Files: minimax-m2/, minimax-m2.logits.bin (float32 LE [300][vocab]) and
minimax_m2.json (prompt, versions, logit scale, top-11 gap; the layout of
make_gqa_families.py's gqa_families.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file

SEED = 3
POSITIONS = 300
VOCAB = 320
NAME = "minimax-m2"


# The released checkpoint's FP8 layout (DeepSeek-V3's): F8_E4M3 codes and a
# float32 weight_scale_inv multiplier per block; blocks that do not divide
# the tiny shapes, so that partial blocks are read too.
BLOCK = (32, 32)
FP8_MAX = 448.0


def fp8_candidate(name: str) -> bool:
    """Whether the release stores this tensor in FP8: the attention
    projections and the routed experts (not the router, norms, embedding or
    head)."""
    return name.endswith("proj.weight") or ".experts." in name or name.endswith((
        ".w1.weight", ".w2.weight", ".w3.weight"))


def block_scales(w: torch.Tensor) -> torch.Tensor:
    """A power-of-two scale per block, so that w / scale fits E4M3."""
    r, c = w.shape
    br, bc = BLOCK
    s = torch.empty((r + br - 1) // br, (c + bc - 1) // bc)
    for i in range(s.shape[0]):
        for j in range(s.shape[1]):
            amax = float(w[i * br:(i + 1) * br, j * bc:(j + 1) * bc].abs().max())
            s[i, j] = 2.0 ** torch.ceil(torch.log2(torch.tensor(max(amax, 1e-30) / FP8_MAX)))
    return s


def expand(s: torch.Tensor, shape) -> torch.Tensor:
    return s.repeat_interleave(BLOCK[0], 0).repeat_interleave(BLOCK[1], 1)[:shape[0], :shape[1]]


def fp8_encode(w: torch.Tensor):
    s = block_scales(w)
    return (w / expand(s, w.shape)).to(torch.float8_e4m3fn), s


def fp8_grid(w: torch.Tensor) -> torch.Tensor:
    q, s = fp8_encode(w.float())
    return q.float() * expand(s, w.shape)


def write_fp8_copy(src: str, dst: str):
    """minimax-m2-fp8/: the same model in the released FP8 layout, one shard."""
    from safetensors.torch import load_file

    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    tensors = {}
    with open(os.path.join(src, "model.safetensors.index.json")) as f:
        files = sorted(set(json.load(f)["weight_map"].values()) - {"model-extra.safetensors"})
    for file in files:
        for n, t in load_file(os.path.join(src, file)).items():
            if t.dim() == 2 and fp8_candidate(n):
                q, s = fp8_encode(t.float())
                assert torch.equal(q.float() * expand(s, t.shape), t.float()), n
                tensors[n], tensors[n + "_scale_inv"] = q, s.float()
            else:
                tensors[n] = t
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "float8_e4m3fn",
                                  "activation_scheme": "dynamic",
                                  "weight_block_size": list(BLOCK)}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def top_gap(logits: torch.Tensor) -> float:
    s = logits.sort(-1, descending=True)[0][:, :11]
    return float((s[:, :-1] - s[:, 1:]).min())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import transformers
    from transformers import MiniMaxM2Config, MiniMaxM2ForCausalLM

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    cfg = MiniMaxM2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=16, num_hidden_layers=4,
        num_local_experts=16, num_experts_per_tok=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=24, rms_norm_eps=1e-6, initializer_range=0.1,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.5},
        bos_token_id=None, eos_token_id=VOCAB - 1, pad_token_id=None,
        attn_implementation="eager", experts_implementation="eager")
    model = MiniMaxM2ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.e_score_correction_bias.copy_(torch.randn(cfg.num_local_experts) * 0.3)
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):  # away from 1, so that a missing norm shows
                p.copy_(0.8 + 0.4 * torch.rand_like(p))
        # The checkpoint holds bf16: round first, so the saved weights are the model's.
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
        for n, b in model.named_buffers():
            if "bias" in n:
                b.copy_(b.to(torch.bfloat16).float())
        # The projections and experts on FP8's grid (power-of-two block
        # scales), so that the FP8 copy below holds exactly these values.
        for n, p in model.named_parameters():
            if p.dim() == 3:  # the fused experts: per expert, gate_up as saved (w1, w3)
                for e in range(p.shape[0]):
                    halves = p[e].chunk(2, 0) if n.endswith("gate_up_proj") else (p[e],)
                    for h in halves:
                        h.copy_(fp8_grid(h))
            elif fp8_candidate(n):
                p.copy_(fp8_grid(p))

    d = os.path.join(args.out, NAME)
    shutil.rmtree(d, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(d, max_shard_size="400KB")
    # A multi-token-prediction layer past num_hidden_layers (a few tensors
    # suffice; transformers builds none), in a shard of its own.
    h, pre = cfg.hidden_size, f"model.layers.{cfg.num_hidden_layers}."
    g = torch.Generator().manual_seed(SEED)
    mtp = {pre + "eh_proj.weight": torch.randn(h, 2 * h, generator=g),
           pre + "enorm.weight": torch.ones(h), pre + "hnorm.weight": torch.ones(h)}
    mtp = {k: v.to(torch.bfloat16).contiguous() for k, v in mtp.items()}
    save_file(mtp, os.path.join(d, "model-extra.safetensors"), metadata={"format": "pt"})
    index_path = os.path.join(d, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    index["weight_map"].update({n: "model-extra.safetensors" for n in mtp})
    with open(index_path, "w") as f:
        json.dump(index, f, indent=1)

    write_fp8_copy(d, d + "-fp8")
    # The oracle: the saved checkpoint loaded back in float32 (its RoPE
    # buffers computed in float32, never cast).
    ref = MiniMaxM2ForCausalLM.from_pretrained(d, dtype=torch.float32,
                                               attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, VOCAB, (POSITIONS,), generator=gen).tolist()
    with torch.no_grad():
        logits = ref(input_ids=torch.tensor([ids])).logits[0].float()
    logits.numpy().astype("<f4").tofile(os.path.join(args.out, NAME + ".logits.bin"))
    case = {"checkpoint": NAME, "fp8_checkpoint": NAME + "-fp8",
            "logits": NAME + ".logits.bin", "shape": [POSITIONS, VOCAB],
            "oracle": "MiniMaxM2ForCausalLM.from_pretrained(dtype=float32), eager",
            "max_abs_logit": float(logits.abs().max()), "min_top11_gap": top_gap(logits)}
    # gqa_families.json's layout, so that the same tests read either.
    meta = {"seed": SEED, "positions": POSITIONS, "prompt_ids": ids,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "cases": {NAME: case}}
    with open(os.path.join(args.out, "minimax_m2.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(case, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
