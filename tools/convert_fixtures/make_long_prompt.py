#!/usr/bin/env python3
"""Writes the long-prompt fixtures of convert_test (tests/fixtures/convert/long/).

    python3 tools/convert_fixtures/make_long_prompt.py --fixtures tests/fixtures/convert

The committed tiny checkpoints (deepseek-v3/, kimi-linear/, written by
make_fixtures.py) over a 1,024-token prompt, so that a rotary error that
grows with the position shows (the short fixtures have 12 positions):

  deepseek-v3 with three rotary settings, the only change to its config:
    plain RoPE at theta 1e4 (Llama's), plain RoPE at theta 1e6 (Qwen3's),
    and YaRN (factor 4 over 64 original positions, as the checkpoint has);
    oracle: transformers' DeepseekV3ForCausalLM.from_pretrained (float32, eager).
  kimi-linear (KDA layers and a NoPE MLA layer); oracle:
    tools/reference/reference_model.py, cross-checked against transformers'
    KimiLinearForCausalLM.from_pretrained.

Files: long.json (the prompt, each case's config overrides, versions and
cross-checks) and <case>.logits.bin, float32 LE [1024][vocab] for every
position (about 1.1 MB each).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
sys.path.insert(0, HERE)  # this folder's make_fixtures, not tools/reference's

from hf_models import block_fla  # noqa: E402

block_fla()  # transformers' Kimi-Linear must take its PyTorch path on a CPU

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from make_fixtures import CheckpointAsContainer  # noqa: E402

POSITIONS = 1024
SEED = 11
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 64, "beta_fast": 32.0, "beta_slow": 1.0,
        "mscale": 1.0, "mscale_all_dim": 1.0}
DEEPSEEK_CASES = {
    "deepseek-v3-rope1e4": {"rope_type": "default", "rope_theta": 1e4},
    "deepseek-v3-rope1e6": {"rope_type": "default", "rope_theta": 1e6},
    "deepseek-v3-yarn": YARN,
}


def prompt_for(cfg: dict, specials: int) -> list[int]:
    """The BOS id, then ids drawn (seeded) from the vocabulary below its specials."""
    g = torch.Generator().manual_seed(SEED)
    ordinary = cfg["vocab_size"] - specials
    return [cfg["bos_token_id"]] + torch.randint(0, ordinary, (POSITIONS - 1,), generator=g).tolist()


def tensors_of(d: str) -> dict:
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(d, f)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", required=True, help="tests/fixtures/convert")
    args = ap.parse_args()
    import transformers
    from transformers import AutoConfig, DeepseekV3ForCausalLM, KimiLinearForCausalLM

    from reference_model import ReferenceModel

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(2)
    out = os.path.join(args.fixtures, "long")
    os.makedirs(out, exist_ok=True)
    meta = {"positions": POSITIONS, "seed": SEED,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "cases": {}}

    src = os.path.join(args.fixtures, "deepseek-v3")
    with open(os.path.join(src, "config.json")) as f:
        ds_cfg = json.load(f)
    ds_prompt = prompt_for(ds_cfg, 4)  # DeepSeek's four specials end the vocabulary
    meta["prompts"] = {"deepseek-v3": ds_prompt}
    for case, rope in DEEPSEEK_CASES.items():
        cfg = AutoConfig.from_pretrained(src)
        cfg.rope_parameters = dict(rope)
        model = DeepseekV3ForCausalLM.from_pretrained(src, config=cfg, dtype=torch.float32,
                                                      attn_implementation="eager").eval()
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ds_prompt])).logits[0].float()
        logits.numpy().astype("<f4").tofile(os.path.join(out, case + ".logits.bin"))
        meta["cases"][case] = {
            "checkpoint": "deepseek-v3", "prompt": "deepseek-v3",
            "config": {"rope_parameters": rope},
            "oracle": "transformers DeepseekV3ForCausalLM.from_pretrained (float32, eager)",
            "inv_freq": model.model.rotary_emb.inv_freq.tolist(),
            "max_abs_logit": float(logits.abs().max())}
        print(case, "done", flush=True)

    src = os.path.join(args.fixtures, "kimi-linear")
    with open(os.path.join(src, "config.json")) as f:
        kimi_cfg = json.load(f)
    kimi_prompt = prompt_for(kimi_cfg, 7)
    meta["prompts"]["kimi-linear"] = kimi_prompt
    ref = ReferenceModel(CheckpointAsContainer(kimi_cfg, tensors_of(src)))
    logits = ref.forward(kimi_prompt, ref.new_state())
    logits.numpy().astype("<f4").tofile(os.path.join(out, "kimi-linear.logits.bin"))
    hf = KimiLinearForCausalLM.from_pretrained(src, dtype=torch.float32,
                                               attn_implementation="eager").eval()
    with torch.no_grad():
        hl = hf(input_ids=torch.tensor([kimi_prompt])).logits[0].float()
    rel = ((hl - logits).abs().max(-1).values / logits.abs().max(-1).values).max()
    meta["cases"]["kimi-linear"] = {
        "checkpoint": "kimi-linear", "prompt": "kimi-linear", "config": {},
        "oracle": "tools/reference/reference_model.py (float32)",
        "cross_check": {"implementation": "transformers KimiLinearForCausalLM.from_pretrained",
                        "worst_diff_over_row_max": float(rel)},
        "max_abs_logit": float(logits.abs().max())}
    with open(os.path.join(out, "long.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps({k: v for k, v in meta.items() if k != "prompts"}, indent=1)[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
