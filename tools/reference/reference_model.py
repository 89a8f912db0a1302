"""An independent float32 forward pass over a dequantized waste container.

One implementation for both model families the engine understands, written
from the models' reference code (Moonshot's modeling_kimi.py and fla for
Kimi-Linear; Hugging Face transformers' DeepseekV3 for DeepSeek-V3), with the
math spelled out in README.md. It is the oracle for Kimi-Linear; for
DeepSeek-V3 the oracle is transformers' own DeepseekV3ForCausalLM
(hf_models.py) and this file is checked against it (selftest.py), which is
what shows the notes in README.md describe HF exactly.

    model = ReferenceModel(Container(path))
    state = model.new_state()
    logits = model.forward([376, 17, 101], state)        # [3, vocab]
    logits = model.forward([42], state)                  # continues at position 3

Every call continues from `state`, so a prompt can be fed whole, token by
token, or in any chunks: all of them go through this same code.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from container import Container

LATENT_NORM_EPS = 1e-6  # q_a_layernorm / kv_a_layernorm: built without an eps in every reference
L2NORM_EPS = 1e-6  # fla's l2norm (use_qk_l2norm_in_kernel): x / sqrt(sum x^2 + eps)


def load_fla_naive():
    """fla/ops/kda/naive.py, loaded by path: the fla package's __init__
    imports Triton kernels that this CPU-only machine cannot run (and the HF
    cross-check blocks `import fla` altogether)."""
    for root in sys.path:
        path = os.path.join(root or ".", "fla", "ops", "kda", "naive.py")
        if os.path.isfile(path):
            s = importlib.util.spec_from_file_location("fla_kda_naive", path)
            mod = importlib.util.module_from_spec(s)
            s.loader.exec_module(mod)
            return mod
    raise ImportError("fla-core is not installed (pip install fla-core)")


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) * w, over the last axis, in float32."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def l2norm(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_tables(cfg: dict) -> tuple[torch.Tensor, float, float]:
    """(inv_freq [rope_dim/2] float32, attention_factor, softmax-scale multiplier),
    as transformers 5.x computes them for DeepseekV3 (default RoPE or YaRN)."""
    dim = int(cfg["qk_rope_head_dim"])
    base = float(cfg.get("rope_theta", 10000.0))
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    rtype = rs.get("rope_type", rs.get("type", "default")) if rs else "default"
    exponents = torch.arange(0, dim, 2, dtype=torch.float32) / dim
    pos_freqs = base ** exponents  # float32, as HF
    if rtype == "default":
        return 1.0 / pos_freqs, 1.0, 1.0
    if rtype != "yarn":
        raise NotImplementedError(f"rope type {rtype}")
    factor = float(rs["factor"])
    orig = float(rs.get("original_max_position_embeddings", 4096))
    mscale = rs.get("mscale")
    mscale_all_dim = rs.get("mscale_all_dim")
    if rs.get("attention_factor") is not None:
        attention_factor = float(rs["attention_factor"])
    elif mscale and mscale_all_dim:
        attention_factor = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
    else:
        attention_factor = yarn_get_mscale(factor)
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1

    def correction_dim(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp  # weight of the original frequency
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    softmax_mult = 1.0
    if mscale_all_dim:
        softmax_mult = yarn_get_mscale(factor, mscale_all_dim) ** 2
    return inv_freq, attention_factor, softmax_mult


def apply_rope(x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor, attn_factor: float,
               interleave: bool) -> torch.Tensor:
    """Rotates x [T, ..., dim] at positions pos [T]. interleave: pairs (2i, 2i+1)
    share frequency i and stay in place; otherwise pairs (i, i + dim/2)."""
    ang = pos.to(torch.float32)[:, None] * inv_freq[None, :]  # [T, dim/2], float32 as HF
    cos = (ang.cos() * attn_factor).view(ang.shape[0], *([1] * (x.dim() - 2)), -1)
    sin = (ang.sin() * attn_factor).view(ang.shape[0], *([1] * (x.dim() - 2)), -1)
    if interleave:
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = b * cos + a * sin
        return out
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


@dataclass
class LayerState:
    conv: list | None = None  # KDA: three [K-1, C] tails of q/k/v projections (pre-conv)
    S: torch.Tensor | None = None  # KDA: [H, Dk, Dv]
    latent: torch.Tensor | None = None  # MLA: [n, kv_lora] (after kv_a_layernorm)
    k_rope: torch.Tensor | None = None  # MLA: [n, rope] (after rotation, if any)


@dataclass
class State:
    pos: int = 0
    layers: list = field(default_factory=list)


class ReferenceModel:
    def __init__(self, c: Container, kda_mode: str = "recurrent", router_weights: str = "scores"):
        self.c = c
        cfg = c.config
        self.cfg = cfg
        self.arch = {"kimi_linear": "kimi_linear", "deepseek_v3": "deepseek_v3",
                     "kimi_k2": "deepseek_v3"}[cfg["model_type"]]
        self.hidden = int(cfg["hidden_size"])
        self.n_layers = int(cfg["num_hidden_layers"])
        self.vocab = int(cfg["vocab_size"])
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.tie = bool(cfg.get("tie_word_embeddings", False))
        self.first_dense = int(cfg.get("first_k_dense_replace", 0) or 0)
        self.n_experts = int(c.cfg("num_experts", "n_routed_experts", default=0))
        self.top_k = int(c.cfg("num_experts_per_token", "num_experts_per_tok", default=0))
        self.renorm = bool(c.cfg("moe_renormalize", "norm_topk_prob", default=False))
        self.routed_scale = float(cfg.get("routed_scaling_factor", 1.0))
        self.n_group = int(c.cfg("num_expert_group", "n_group", default=1))
        self.topk_group = int(cfg.get("topk_group", 1) or 1)
        self.scoring = c.cfg("moe_router_activation_func", "scoring_func", default="sigmoid")
        self.router_weights = router_weights  # "scores" or "biased" (see README)
        # attention
        self.n_heads = int(cfg["num_attention_heads"])
        self.q_lora = int(cfg.get("q_lora_rank") or 0)
        self.kv_lora = int(cfg.get("kv_lora_rank") or 0)
        self.qk_nope = int(cfg.get("qk_nope_head_dim") or 0)
        self.qk_rope = int(cfg.get("qk_rope_head_dim") or 0)
        self.v_head = int(cfg.get("v_head_dim") or 0)
        self.nope = bool(cfg.get("mla_use_nope", False))
        self.interleave = bool(cfg.get("rope_interleave", True))  # HF DeepseekV3Config default
        self.softmax_scale = (self.qk_nope + self.qk_rope) ** -0.5 if self.kv_lora else 0.0
        self.inv_freq, self.attn_factor = None, 1.0
        if self.kv_lora and not self.nope:
            self.inv_freq, self.attn_factor, mult = rope_tables(cfg)
            self.softmax_scale *= mult
        lac = cfg.get("linear_attn_config") or {}
        self.kda_layers = {int(i) - 1 for i in lac.get("kda_layers", [])}  # 1-based in the config
        self.kda_heads = int(lac.get("num_heads", 0) or 0)
        self.kda_dim = int(lac.get("head_dim", 0) or 0)
        self.conv_k = int(lac.get("short_conv_kernel_size", 4) or 4)
        self.kda_mode = kda_mode
        self._naive = load_fla_naive() if self.kda_layers else None
        self._w: dict[str, torch.Tensor] = {}
        self._experts: dict[tuple, dict] = {}

    # ---- weights
    def w(self, name: str) -> torch.Tensor:
        if name not in self._w:
            self._w[name] = torch.from_numpy(np.ascontiguousarray(self.c.tensor(name)))
        return self._w[name]

    def expert(self, layer: int, e: int) -> dict:
        key = (layer, e)
        if key not in self._experts:
            self._experts[key] = {k: torch.from_numpy(v) for k, v in self.c.expert(layer, e).items()}
        return self._experts[key]

    def new_state(self) -> State:
        return State(pos=0, layers=[LayerState() for _ in range(self.n_layers)])

    # ---- blocks
    def kda(self, L: int, h: torch.Tensor, st: LayerState) -> torch.Tensor:
        p = f"model.layers.{L}.self_attn."
        T = h.shape[0]
        H, D, K = self.kda_heads, self.kda_dim, self.conv_k
        C = H * D
        if st.conv is None:
            st.conv = [torch.zeros(K - 1, C) for _ in range(3)]
            st.S = torch.zeros(H, D, D)
        qkv = []
        for i, n in enumerate("qkv"):
            x = h @ self.w(p + f"{n}_proj.weight").T  # [T, C]
            seq = torch.cat([st.conv[i], x], 0)  # [K-1+T, C]: zero history before the first token
            wc = self.w(p + f"{n}_conv1d.weight").view(C, K)  # tap j multiplies x[t-(K-1)+j]
            y = torch.zeros(T, C)
            for j in range(K):
                y = y + seq[j:j + T] * wc[:, j]
            st.conv[i] = seq[T:].clone()  # the last K-1 projections
            qkv.append(F.silu(y).view(T, H, D))
        q, k, v = qkv
        f = (h @ self.w(p + "f_a_proj.weight").T) @ self.w(p + "f_b_proj.weight").T  # [T, C]
        A = self.w(p + "A_log").flatten()[:H].exp().view(1, H, 1)
        g = -A * F.softplus(f.view(T, H, D) + self.w(p + "dt_bias").view(1, H, D))  # threshold 20
        beta = torch.sigmoid(h @ self.w(p + "b_proj.weight").T)  # [T, H]
        q, k = l2norm(q), l2norm(k)
        if self.kda_mode == "recurrent":
            o, S = self._naive.naive_recurrent_kda(
                q[None], k[None], v[None], g[None], beta[None],
                initial_state=st.S[None], output_final_state=True)  # scale defaults to D^-0.5
        else:  # fla's chunked reference, zero-padded to whole chunks of 64 (g=0, beta=0: no-op)
            pad = (-T) % 64
            z = lambda x: F.pad(x, [0, 0] * (x.dim() - 1) + [0, pad])  # noqa: E731
            o, S = self._naive.naive_chunk_kda(
                z(q)[None], z(k)[None], z(v)[None], z(g)[None], F.pad(beta, [0, 0, 0, pad])[None],
                initial_state=st.S[None], output_final_state=True)
            o = o[:, :T]
        st.S = S[0]
        o = o[0]  # [T, H, D]
        gate = (h @ self.w(p + "g_a_proj.weight").T) @ self.w(p + "g_b_proj.weight").T
        o = rms_norm(o, self.w(p + "o_norm.weight"), self.eps) * torch.sigmoid(gate.view(T, H, D))
        return o.reshape(T, C) @ self.w(p + "o_proj.weight").T

    def mla(self, L: int, h: torch.Tensor, st: LayerState, pos0: int) -> torch.Tensor:
        p = f"model.layers.{L}.self_attn."
        T, H = h.shape[0], self.n_heads
        nope, rope, vd = self.qk_nope, self.qk_rope, self.v_head
        if self.q_lora:
            qa = rms_norm(h @ self.w(p + "q_a_proj.weight").T, self.w(p + "q_a_layernorm.weight"),
                          LATENT_NORM_EPS)
            q = qa @ self.w(p + "q_b_proj.weight").T
        else:
            q = h @ self.w(p + "q_proj.weight").T
        q = q.view(T, H, nope + rope)
        ckv = h @ self.w(p + "kv_a_proj_with_mqa.weight").T
        lat = rms_norm(ckv[:, :self.kv_lora], self.w(p + "kv_a_layernorm.weight"), LATENT_NORM_EPS)
        kr = ckv[:, self.kv_lora:]
        if not self.nope and rope:
            pos = torch.arange(pos0, pos0 + T)
            q = torch.cat([q[..., :nope],
                           apply_rope(q[..., nope:], pos, self.inv_freq, self.attn_factor,
                                      self.interleave)], -1)
            kr = apply_rope(kr, pos, self.inv_freq, self.attn_factor, self.interleave)
        st.latent = lat if st.latent is None else torch.cat([st.latent, lat], 0)
        st.k_rope = kr if st.k_rope is None else torch.cat([st.k_rope, kr], 0)
        N = st.latent.shape[0]
        kv = (st.latent @ self.w(p + "kv_b_proj.weight").T).view(N, H, nope + vd)
        k = torch.cat([kv[..., :nope], st.k_rope[:, None, :].expand(N, H, rope)], -1)
        val = kv[..., nope:]
        s = torch.einsum("thd,shd->hts", q, k) * self.softmax_scale
        qpos = torch.arange(pos0, pos0 + T)[:, None]
        kpos = torch.arange(N)[None, :]
        s = s.masked_fill(kpos > qpos, float("-inf"))
        a = torch.softmax(s, -1)
        o = torch.einsum("hts,shd->thd", a, val).reshape(T, H * vd)
        return o @ self.w(p + "o_proj.weight").T

    def mlp(self, x: torch.Tensor, prefix: str) -> torch.Tensor:
        a = x @ self.w(prefix + "gate_proj.weight").T
        b = x @ self.w(prefix + "up_proj.weight").T
        return (F.silu(a) * b) @ self.w(prefix + "down_proj.weight").T

    def route(self, L: int, h: torch.Tensor):
        p = f"model.layers.{L}.block_sparse_moe.gate."
        logits = h @ self.w(p + "weight").T  # [T, E], float32
        if self.scoring == "sigmoid":
            scores = torch.sigmoid(logits)
        else:
            scores = torch.softmax(logits, -1)
        choice = scores + self.w(p + "e_score_correction_bias")[None, :]
        E, G = self.n_experts, self.n_group
        margin = torch.full((h.shape[0],), float("inf"))
        if G > 1:
            gs = choice.view(-1, G, E // G).topk(min(2, E // G), -1)[0].sum(-1)  # [T, G]
            keep = torch.zeros_like(gs).scatter_(1, gs.topk(self.topk_group, -1)[1], 1.0)
            mask = keep[:, :, None].expand(-1, G, E // G).reshape(-1, E).bool()
            choice = choice.masked_fill(~mask, float("-inf"))
            if self.topk_group < G:
                gsorted = gs.sort(-1, descending=True)[0]
                margin = gsorted[:, self.topk_group - 1] - gsorted[:, self.topk_group]
        idx = choice.topk(self.top_k, -1)[1]  # [T, k], best first
        if self.top_k < E:
            csorted = choice.sort(-1, descending=True)[0]
            margin = torch.minimum(margin, csorted[:, self.top_k - 1] - csorted[:, self.top_k])
        self._last_margin = margin  # how far each token is from choosing differently
        src = scores if self.router_weights == "scores" else scores + self.w(p + "e_score_correction_bias")
        wts = src.gather(1, idx)
        if self.renorm:
            wts = wts / (wts.sum(-1, keepdim=True) + 1e-20)
        return idx, wts * self.routed_scale

    def moe(self, L: int, h: torch.Tensor, trace: list | None) -> torch.Tensor:
        idx, wts = self.route(L, h)
        y = torch.zeros_like(h)
        for t in range(h.shape[0]):
            for j in range(self.top_k):
                e = self.expert(L, int(idx[t, j]))
                x = h[t]
                a = F.silu(x @ e["gate"].T) * (x @ e["up"].T)
                y[t] += wts[t, j] * (a @ e["down"].T)
        if trace is not None:
            trace.append({"layer": L, "experts": idx.tolist(), "weights": wts.tolist(),
                          "margin": self._last_margin.tolist()})
        if self.c.has(f"model.layers.{L}.block_sparse_moe.shared_experts.gate_proj.weight"):
            y = y + self.mlp(h, f"model.layers.{L}.block_sparse_moe.shared_experts.")
        return y

    # ---- the model
    @torch.no_grad()
    def forward(self, ids, state: State, trace: dict | None = None) -> torch.Tensor:
        """Logits [T, vocab] for the tokens `ids`, continuing `state`.
        trace, if given, receives "routing" (per MoE layer) and "hidden"
        (the residual stream of the last token after the embedding and
        after every layer)."""
        ids = torch.as_tensor(list(ids), dtype=torch.long)
        T = ids.shape[0]
        pos0 = state.pos
        x = self.w("model.embed_tokens.weight")[ids]
        routing = [] if trace is not None else None
        hidden = [x[-1].clone()] if trace is not None else None
        for L in range(self.n_layers):
            pre = f"model.layers.{L}."
            st = state.layers[L]
            h = rms_norm(x, self.w(pre + "input_layernorm.weight"), self.eps)
            if L in self.kda_layers:
                x = x + self.kda(L, h, st)
            else:
                x = x + self.mla(L, h, st, pos0)
            h = rms_norm(x, self.w(pre + "post_attention_layernorm.weight"), self.eps)
            if self.n_experts and L >= self.first_dense:
                x = x + self.moe(L, h, routing)
            else:
                x = x + self.mlp(h, pre + "mlp.")
            if hidden is not None:
                hidden.append(x[-1].clone())
        state.pos += T
        x = rms_norm(x, self.w("model.norm.weight"), self.eps)
        head = self.w("model.embed_tokens.weight") if self.tie else self.w("lm_head.weight")
        if trace is not None:
            trace["routing"] = routing
            trace["hidden"] = torch.stack(hidden)
        return x @ head.T
