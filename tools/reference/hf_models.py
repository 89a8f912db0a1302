"""Hugging Face transformers models built from a waste container.

deepseek_v3 (and kimi_k2): DeepseekV3ForCausalLM, float32, eager attention,
eager experts. kimi_linear: KimiLinearForCausalLM (transformers ships it
since 5.x), used only as a cross-check of reference_model.py, because with
fla-core installed transformers binds fla's Triton kernels, which cannot run
here; `hf_kimi_linear` must therefore be called in a process where `fla`
was blocked before transformers was imported (see block_fla()).

The container's tensor names are HF's except:
  model.layers.L.block_sparse_moe.gate.weight               -> model.layers.L.mlp.gate.weight
  model.layers.L.block_sparse_moe.gate.e_score_correction_bias
                                                            -> model.layers.L.mlp.gate.e_score_correction_bias
  model.layers.L.block_sparse_moe.shared_experts.*          -> model.layers.L.mlp.shared_experts.*
  routed expert E of layer L (experts-L{L}.bin)             -> model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight
     which transformers 5.x keeps packed: mlp.experts.gate_up_proj[E] = cat(gate, up) [2*I, H],
     mlp.experts.down_proj[E] = down [H, I]
and, for Kimi-Linear only,
  self_attn.{q,k,v}_conv1d.weight [C,1,K]  -> self_attn.conv1d.weight [3C,1,K] (q, k, v stacked)
  self_attn.{A_log,dt_bias,f_a_proj.weight,f_b_proj.weight} -> self_attn.forget_gate.*
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from container import Container


def block_fla():
    """Make `import fla` fail so transformers binds its pure-PyTorch KDA."""
    sys.modules["fla"] = None


def _hf_config_kwargs(c: Container) -> dict:
    cfg = dict(c.config)
    return dict(
        cfg,
        # The defaults are the full-size model's (128 / 32 KV heads) and would
        # make num_key_value_groups 0 here; MLA has one KV "head" per query head.
        num_key_value_heads=int(cfg["num_attention_heads"]),
        pad_token_id=None,  # Kimi's default (163839) lies outside a small vocabulary
        attn_implementation="eager",
        experts_implementation="eager",
    )


def _state_dict(c: Container, model: torch.nn.Module, kimi: bool) -> dict:
    sd = {}
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    for full in c.trunk_entries:
        name = full[len(c.prefix):]
        hf = name.replace(".block_sparse_moe.", ".mlp.")
        if kimi and ".self_attn." in name:
            leaf = name.split(".self_attn.", 1)[1]
            if leaf in ("A_log", "dt_bias", "f_a_proj.weight", "f_b_proj.weight"):
                hf = name.replace(".self_attn.", ".self_attn.forget_gate.")
            elif leaf.endswith("_conv1d.weight"):
                continue  # stacked below
        sd[hf] = t(c.tensor(name))
    cfg = c.config
    for L in range(int(cfg["num_hidden_layers"])):
        if kimi and c.has(f"model.layers.{L}.self_attn.q_conv1d.weight"):
            sd[f"model.layers.{L}.self_attn.conv1d.weight"] = torch.cat(
                [t(c.tensor(f"model.layers.{L}.self_attn.{n}_conv1d.weight")) for n in "qkv"], 0)
        if L in c.layers:
            ex = [c.expert(L, e) for e in range(c.n_experts)]
            sd[f"model.layers.{L}.mlp.experts.gate_up_proj"] = torch.stack(
                [t(np.concatenate([e["gate"], e["up"]], 0)) for e in ex])
            sd[f"model.layers.{L}.mlp.experts.down_proj"] = torch.stack([t(e["down"]) for e in ex])
    want = set(model.state_dict().keys())
    missing, extra = want - set(sd), set(sd) - want
    if missing or extra:
        raise RuntimeError(f"state dict mismatch: missing {sorted(missing)[:8]}, extra {sorted(extra)[:8]}")
    return sd


def hf_deepseek_v3(c: Container):
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    config = DeepseekV3Config(**_hf_config_kwargs(c))
    model = DeepseekV3ForCausalLM(config).float().eval()
    model.load_state_dict(_state_dict(c, model, kimi=False), strict=True)
    assert config._attn_implementation == "eager" and config._experts_implementation == "eager"
    return model


def hf_kimi_linear(c: Container):
    if sys.modules.get("fla", 0) is not None:
        raise RuntimeError("call block_fla() before importing transformers' kimi_linear")
    from transformers import KimiLinearConfig, KimiLinearForCausalLM

    config = KimiLinearConfig(**_hf_config_kwargs(c))
    model = KimiLinearForCausalLM(config).float().eval()
    model.load_state_dict(_state_dict(c, model, kimi=True), strict=True)
    return model


class HFRunner:
    """Feeds tokens to a HF causal LM with a cache, like ReferenceModel."""

    def __init__(self, model):
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.pos = 0

    @torch.no_grad()
    def forward(self, ids, trace: dict | None = None) -> torch.Tensor:
        ids = torch.as_tensor([list(ids)], dtype=torch.long)
        hooks, routing, hidden = [], [], []
        if trace is not None:
            layers = self.model.model.layers
            for L, layer in enumerate(layers):
                gate = getattr(layer.mlp, "gate", None)
                if gate is not None and hasattr(gate, "e_score_correction_bias"):
                    hooks.append(gate.register_forward_hook(
                        lambda m, i, o, L=L: routing.append(
                            {"layer": L, "experts": o[2].tolist(), "weights": o[1].tolist()})))
                hooks.append(layer.register_forward_hook(
                    lambda m, i, o: hidden.append((o[0] if isinstance(o, tuple) else o)[0, -1].clone())))
            hooks.append(self.model.model.embed_tokens.register_forward_hook(
                lambda m, i, o: hidden.append(o[0, -1].clone())))
        try:
            out = self.model(input_ids=ids, cache=self.cache, use_cache=True)
        finally:
            for h in hooks:
                h.remove()
        self.pos += ids.shape[1]
        if trace is not None:
            trace["routing"] = routing
            trace["hidden"] = torch.stack(hidden)
        return out.logits[0].float()
