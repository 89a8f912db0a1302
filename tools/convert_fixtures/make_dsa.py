#!/usr/bin/env python3
"""Writes the DeepSeek-V3.2 and GLM-5 (DSA) fixtures of dsa_test (tests/fixtures/convert/).

    python3 tools/convert_fixtures/make_dsa.py --out tests/fixtures/convert [--only FAMILY]

deepseek-v32/: DeepseekV32ForCausalLM (DeepSeek-V3.2), a tiny random
checkpoint written by transformers' own class (save_pretrained, bf16, shards
and an index): 2 layers, mlp_layer_types dense then sparse; MLA with
q_lora_rank 16, kv_lora_rank 16, nope 8 + rope 8, v_head_dim 8; the
lightning indexer with 16 heads of 16 and index_topk 64, so that over the
2,100-token prompt every position past 63 attends a chosen 64 (below top-k
DSA is dense attention); 8 experts in 4 groups of which 2 are kept, top-2, a
shared expert, a random e_score_correction_bias; a multi-token-prediction
layer 2 (a few tensors under the released names) that waste convert skips.
glm-moe-dsa/: GlmMoeDsaForCausalLM (GLM-5) of the same shapes but its own:
the indexer's rotary interleaved, no expert groups, v_head_dim 12, and
GLM-5.2's index sharing, indexer_types full then shared (layer 1 has no
indexer and attends layer 0's choice).
The vocabulary is 32 ids so that float32 logits at all 2,100 positions stay
small (269 KB).

The reference: that directory loaded back with from_pretrained(dtype=float32),
eager, the whole prompt in one forward. The indexer's choices are checked
here against its scores recomputed in float64 (the same set at every
position). A choice and a top-10 are only as sure as the gap at their
boundary: of SEEDS, the model whose smallest gaps (the 64th against the
65th index score, the top-11 logits) are the largest against float32's
rounding is written, and the gaps are recorded.

Files: <family>/, <family>.logits.bin (float32 LE [2100][32]) and
dsa.json (prompt, versions, logit scale, top-11 gap, index gaps).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from make_glm_lite_dots import bf16_round_, top_gap  # noqa: E402

SEED = 7  # the prompt's and the MTP tensors'
SEEDS = range(100, 124)  # the models tried
INDEX_GAP = 2e-6
TOP_GAP = 4e-6
FAMILIES = ["deepseek-v32", "glm-moe-dsa"]
POSITIONS = 2100
VOCAB = 32
TOPK = 64


def prompt() -> list[int]:
    g = torch.Generator().manual_seed(SEED)
    return torch.randint(0, VOCAB, (POSITIONS,), generator=g).tolist()


def index_gaps(model, ids: list[int]) -> tuple[list[float], torch.Tensor]:
    """The logits and, per layer, the smallest gap between the top-k-th and the
    next index score (float64, relative to the row's largest |score|) over the
    positions past the top-k, after checking that float32's choice (the
    model's own) is float64's."""
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import apply_rotary_pos_emb
    from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import apply_rotary_pos_emb_interleave

    rotate = apply_rotary_pos_emb if model.config.model_type == "deepseek_v32" else \
        apply_rotary_pos_emb_interleave
    seen = {}

    def hook(mod, args, kwargs, out):
        seen[mod.layer_idx] = (args, out)

    handles = [layer.self_attn.indexer.register_forward_hook(hook, with_kwargs=True)
               for layer in model.model.layers if layer.self_attn.indexer is not None]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    for h in handles:
        h.remove()
    gaps = []
    for L, (args, chosen) in sorted(seen.items()):
        ix = model.model.layers[L].self_attn.indexer
        with torch.no_grad():
            hs, q_resid, (cos, sin) = args[0][0].double(), args[1][0].double(), args[2]
            d, r = ix.head_dim, ix.qk_rope_head_dim
            q = (q_resid @ ix.wq_b.weight.double().T).view(len(ids), ix.n_heads, d)
            k = torch.nn.functional.layer_norm(hs @ ix.wk.weight.double().T, (d,),
                                               ix.k_norm.weight.double(), ix.k_norm.bias.double(),
                                               ix.k_norm.eps).unsqueeze(1)
            q_rot, k_rot = rotate(q[..., :r].unsqueeze(0), k[..., :r].unsqueeze(0),
                                                cos.double(), sin.double(), unsqueeze_dim=2)
            q = torch.cat([q_rot[0], q[..., r:]], -1)
            k = torch.cat([k_rot[0], k[..., r:]], -1)[:, 0]
            w = (hs @ ix.weights_proj.weight.double().T) * ix.n_heads ** -0.5
        worst = float("inf")
        for b in range(TOPK, len(ids), 256):
            rows = range(b, min(b + 256, len(ids)))
            with torch.no_grad():
                s = torch.relu(torch.einsum("shd,td->sht", q[rows.start:rows.stop], k) * d ** -0.5)
                score = torch.einsum("sh,sht->st", w[rows.start:rows.stop], s)
            for p in rows:
                row = score[p - rows.start, :p + 1]
                top = row.topk(TOPK + 1)
                worst = min(worst, float((top.values[TOPK - 1] - top.values[TOPK]) / row.abs().max()))
                if set(top.indices[:TOPK].tolist()) != set(chosen[0, p].tolist()):
                    return [0.0], logits  # float32 chose otherwise: a seed not to use
        gaps.append(worst)
    return gaps, logits


def build(family: str, seed: int):
    import transformers

    torch.manual_seed(seed)
    shapes = dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
        num_hidden_layers=2, mlp_layer_types=["dense", "sparse"], first_k_dense_replace=1,
        n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
        norm_topk_prob=True, routed_scaling_factor=2.5, num_attention_heads=2,
        num_key_value_heads=2, q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8,
        qk_rope_head_dim=8, index_topk=TOPK, index_n_heads=16, index_head_dim=16,
        initializer_range=0.2, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e4},
        max_position_embeddings=4096, bos_token_id=None, eos_token_id=VOCAB - 1,
        pad_token_id=None, attn_implementation="eager", experts_implementation="eager")
    if family == "deepseek-v32":
        shapes.update(n_group=4, topk_group=2, v_head_dim=8, rms_norm_eps=1e-6)
        cls, config = transformers.DeepseekV32ForCausalLM, transformers.DeepseekV32Config
    else:  # GLM-5: no groups, v_head_dim apart from the nope dims; GLM-5.2's sharing
        shapes.update(n_group=1, topk_group=1, v_head_dim=12, rms_norm_eps=1e-5,
                      indexer_types=["full", "shared"])
        cls, config = transformers.GlmMoeDsaForCausalLM, transformers.GlmMoeDsaConfig
    cfg = config(**shapes)
    model = cls(cfg).float().eval()
    with torch.no_grad():
        model.model.layers[1].mlp.gate.e_score_correction_bias.copy_(torch.randn(8) * 0.3)
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(0.8 + 0.4 * torch.rand_like(p))
            if n.endswith("k_norm.bias"):
                p.copy_(0.2 * torch.randn_like(p))
    bf16_round_(model)
    return cfg, model


def margin(gaps: list[float], logits: torch.Tensor) -> float:
    """How far the closest decision is from float32's rounding: the index
    boundary's gap against INDEX_GAP, the top-11 logits' against TOP_GAP."""
    return min(min(gaps) / INDEX_GAP, top_gap(logits) / float(logits.abs().max()) / TOP_GAP)


def make(out: str, name: str, ids: list[int]) -> dict:
    from safetensors.torch import save_file

    # The seed, of SEEDS, whose closest decision is farthest from rounding:
    # over 4,200 rows a boundary's gap is about 1e-6 of the row's largest.
    best = max(SEEDS, key=lambda sd: margin(*index_gaps(build(name, sd)[1], ids)))
    cfg, model = build(name, best)
    with torch.no_grad():
        own = model(input_ids=torch.tensor([ids])).logits[0].float()
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(d, max_shard_size="60KB")
    # The multi-token-prediction layer as V3.2 ships it (layer
    # num_hidden_layers; a few of its tensors): transformers builds none.
    h, p = cfg.hidden_size, f"model.layers.{cfg.num_hidden_layers}."
    g = torch.Generator().manual_seed(SEED)
    mtp = {p + "eh_proj.weight": torch.randn(h, 2 * h, generator=g),
           p + "enorm.weight": torch.ones(h), p + "hnorm.weight": torch.ones(h),
           p + "self_attn.indexer.wk.weight": torch.randn(16, h, generator=g)}
    mtp = {k: v.to(torch.bfloat16).contiguous() for k, v in mtp.items()}
    save_file(mtp, os.path.join(d, "model-extra.safetensors"), metadata={"format": "pt"})
    index_path = os.path.join(d, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    index["weight_map"].update({n: "model-extra.safetensors" for n in mtp})
    with open(index_path, "w") as f:
        json.dump(index, f, indent=1)
    with open(os.path.join(d, "config.json")) as f:  # as the release's config has it
        c = json.load(f)
    c["num_nextn_predict_layers"] = 1
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)

    ref = type(model).from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                                 experts_implementation="eager").eval()
    gaps, logits = index_gaps(ref, ids)
    drift = float((logits - own).abs().max() / logits.abs().max())
    if drift > 1e-6:
        raise SystemExit(f"{name}: the loaded model's logits differ from the saved one's by {drift}")
    # Sparse attention must matter: the same model with every position kept.
    for layer in ref.model.layers:
        if layer.self_attn.indexer is not None:
            layer.self_attn.indexer.index_topk = POSITIONS
    with torch.no_grad():
        dense = ref(input_ids=torch.tensor([ids])).logits[0].float()
    logits.numpy().astype("<f4").tofile(os.path.join(out, name + ".logits.bin"))
    return {"checkpoint": name, "logits": name + ".logits.bin", "shape": [len(ids), VOCAB],
            "seed": best, "oracle": type(model).__name__ + ".from_pretrained(dtype=float32), eager",
            "max_abs_logit": float(logits.abs().max()), "min_top11_gap": top_gap(logits),
            "dense_vs_sparse_max_rel": float((dense - logits).abs().max() / logits.abs().max()),
            "min_index_gap_per_layer": gaps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", choices=FAMILIES, help="remake one family, keeping the other's entry")
    args = ap.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    ids = prompt()
    path = os.path.join(args.out, "dsa.json")
    cases = {}
    if args.only and os.path.exists(path):
        with open(path) as f:
            cases = json.load(f)["cases"]
    for name in [args.only] if args.only else FAMILIES:
        cases[name] = make(args.out, name, ids)
    meta = {"seed": SEED, "positions": POSITIONS, "index_topk": TOPK, "prompt_ids": ids,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "cases": cases}
    with open(os.path.join(args.out, "dsa.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta["cases"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
