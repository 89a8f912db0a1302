"""A float32 forward pass of Kimi K3's text model, the oracle for K3.

No library implements K3, so this is written from the facts (WARP's
docs/K3.md, the release's config and tensor names) and the equations of the
published modeling code (modeling_kimi_linear.py shipped with the weights, fla
for the KDA recurrence), spelled out in README.md ("Kimi K3"). It reads weights
through the interface of container.Container (a WARP v0 container, dequantized
exactly) or checkpoint.Checkpoint (the released checkpoint, MXFP4 decoded):
names without the tensor prefix, experts by (layer, id).

    model = K3Model(Container(path))            # or K3Model(Checkpoint(dir))
    state = model.new_state()
    logits = model.forward(ids, state)          # [T, vocab]; later calls continue
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from reference_model import LATENT_NORM_EPS, LayerState, State, l2norm, load_fla_naive, rms_norm


def situ(a: torch.Tensor, b: torch.Tensor, beta: float, lbeta: float | None) -> torch.Tensor:
    """SiTU and multiply: beta tanh(a/beta) sigmoid(a), times the up half squashed
    by linear_beta tanh(b/linear_beta) when linear_beta is set."""
    act = beta * torch.tanh(a / beta) * torch.sigmoid(a)
    return act * (lbeta * torch.tanh(b / lbeta) if lbeta else b)


def attn_res(blocks: list, partial: torch.Tensor, norm_w, proj_w, eps: float) -> torch.Tensor:
    """Attention over the depth: the candidates are the finished block
    representations and the running partial sum, each token on its own;
    score_i = <RMSNorm(v_i; norm_w), proj_w>, out = softmax(score) . v."""
    v = torch.stack(list(blocks) + [partial], -2)  # [T, n+1, hidden]
    score = (rms_norm(v, norm_w, eps) * proj_w).sum(-1)  # [T, n+1]
    return (torch.softmax(score, -1).unsqueeze(-1) * v).sum(-2)


class K3Model:
    def __init__(self, src, mla_norm_eps: float = LATENT_NORM_EPS):
        self.src = src
        cfg = src.config
        self.cfg = cfg
        self.hidden = int(cfg["hidden_size"])
        self.n_layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg["rms_norm_eps"])
        self.mla_norm_eps = mla_norm_eps  # q_a / kv_a layernorms (README: "Kimi K3")
        self.first_dense = int(cfg.get("first_k_dense_replace", 0) or 0)
        self.n_experts = int(cfg["num_experts"])
        self.top_k = int(cfg["num_experts_per_token"])
        self.renorm = bool(cfg.get("moe_renormalize", False))
        self.routed_scale = float(cfg.get("routed_scaling_factor", 1.0))
        if int(cfg.get("num_expert_group", 1) or 1) != 1:
            raise NotImplementedError("K3 routes with one group")
        self.latent = int(cfg.get("routed_expert_hidden_size") or 0)
        self.latent_norm = bool(cfg.get("latent_moe_use_norm", False))
        self.block = int(cfg.get("attn_res_block_size") or 0)
        self.situ = cfg.get("hidden_act") == "situ"
        self.beta = float(cfg.get("activation_situ_beta", 1.0))
        self.lbeta = cfg.get("activation_situ_linear_beta")
        self.n_heads = int(cfg["num_attention_heads"])
        self.q_lora = int(cfg.get("q_lora_rank") or 0)
        self.kv_lora = int(cfg["kv_lora_rank"])
        self.qk_nope, self.qk_rope = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"])
        self.v_head = int(cfg["v_head_dim"])
        if not cfg.get("mla_use_nope", False):
            raise NotImplementedError("K3's MLA is NoPE")
        self.mla_gate = bool(cfg.get("mla_use_output_gate", False))
        lac = cfg["linear_attn_config"]
        self.kda_layers = {int(i) - 1 for i in lac["kda_layers"]}  # 1-based in the config
        self.kda_heads, self.kda_dim = int(lac["num_heads"]), int(lac["head_dim"])
        self.conv_k = int(lac.get("short_conv_kernel_size", 4))
        self.full_gate = bool(lac.get("use_full_rank_gate", False))
        self.lower_bound = lac.get("gate_lower_bound")
        self._naive = load_fla_naive()
        self._w: dict = {}
        self._e: dict = {}

    def w(self, name: str) -> torch.Tensor:
        if name not in self._w:
            self._w[name] = torch.from_numpy(np.ascontiguousarray(self.src.tensor(name)))
        return self._w[name]

    def expert(self, layer: int, e: int) -> dict:
        if (layer, e) not in self._e:
            self._e[(layer, e)] = {k: torch.from_numpy(np.ascontiguousarray(v))
                                   for k, v in self.src.expert(layer, e).items()}
        return self._e[(layer, e)]

    def new_state(self) -> State:
        return State(pos=0, layers=[LayerState() for _ in range(self.n_layers)])

    def act(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return situ(a, b, self.beta, self.lbeta) if self.situ else F.silu(a) * b

    # ---- attention
    def kda(self, L: int, h: torch.Tensor, st: LayerState) -> torch.Tensor:
        p = f"model.layers.{L}.self_attn."
        T, H, D, K = h.shape[0], self.kda_heads, self.kda_dim, self.conv_k
        C = H * D
        if st.conv is None:
            st.conv = [torch.zeros(K - 1, C) for _ in range(3)]
            st.S = torch.zeros(H, D, D)
        qkv = []
        for i, n in enumerate("qkv"):
            x = h @ self.w(p + f"{n}_proj.weight").T
            seq = torch.cat([st.conv[i], x], 0)  # causal: K-1 earlier projections, zeros at first
            wc = self.w(p + f"{n}_conv1d.weight").view(C, K)
            y = sum(seq[j:j + T] * wc[:, j] for j in range(K))
            st.conv[i] = seq[T:].clone()
            qkv.append(F.silu(y).view(T, H, D))
        q, k, v = qkv
        z = ((h @ self.w(p + "f_a_proj.weight").T) @ self.w(p + "f_b_proj.weight").T).view(T, H, D)
        z = z + self.w(p + "dt_bias").view(1, H, D)
        A = self.w(p + "A_log").flatten()[:H].exp().view(1, H, 1)  # one per head; K3 pads to head_dim
        if self.lower_bound is not None:
            g = float(self.lower_bound) * torch.sigmoid(A * z)  # log-decay in (lower_bound, 0)
        else:
            g = -A * F.softplus(z)
        beta = torch.sigmoid(h @ self.w(p + "b_proj.weight").T)
        o, S = self._naive.naive_recurrent_kda(
            l2norm(q)[None], l2norm(k)[None], v[None], g[None], beta[None],
            initial_state=st.S[None], output_final_state=True)  # scale D^-0.5
        st.S = S[0]
        if self.full_gate:
            gate = h @ self.w(p + "g_proj.weight").T
        else:
            gate = (h @ self.w(p + "g_a_proj.weight").T) @ self.w(p + "g_b_proj.weight").T
        o = rms_norm(o[0], self.w(p + "o_norm.weight"), self.eps) * torch.sigmoid(gate.view(T, H, D))
        return o.reshape(T, C) @ self.w(p + "o_proj.weight").T

    def mla(self, L: int, h: torch.Tensor, st: LayerState, pos0: int) -> torch.Tensor:
        p = f"model.layers.{L}.self_attn."
        T, Hh = h.shape[0], self.n_heads
        nope, rope, vd = self.qk_nope, self.qk_rope, self.v_head
        if self.q_lora:
            qa = rms_norm(h @ self.w(p + "q_a_proj.weight").T, self.w(p + "q_a_layernorm.weight"),
                          self.mla_norm_eps)
            q = qa @ self.w(p + "q_b_proj.weight").T
        else:
            q = h @ self.w(p + "q_proj.weight").T
        q = q.view(T, Hh, nope + rope)
        ckv = h @ self.w(p + "kv_a_proj_with_mqa.weight").T
        lat = rms_norm(ckv[:, :self.kv_lora], self.w(p + "kv_a_layernorm.weight"), self.mla_norm_eps)
        kr = ckv[:, self.kv_lora:]  # NoPE: the rope slice is used unrotated
        st.latent = lat if st.latent is None else torch.cat([st.latent, lat], 0)
        st.k_rope = kr if st.k_rope is None else torch.cat([st.k_rope, kr], 0)
        N = st.latent.shape[0]
        kv = (st.latent @ self.w(p + "kv_b_proj.weight").T).view(N, Hh, nope + vd)
        key = torch.cat([kv[..., :nope], st.k_rope[:, None, :].expand(N, Hh, rope)], -1)
        s = torch.einsum("thd,shd->hts", q, key) * (nope + rope) ** -0.5
        qpos = torch.arange(pos0, pos0 + T)[:, None]
        s = s.masked_fill(torch.arange(N)[None, :] > qpos, float("-inf"))
        o = torch.einsum("hts,shd->thd", torch.softmax(s, -1), kv[..., nope:]).reshape(T, Hh * vd)
        if self.mla_gate:
            o = o * torch.sigmoid(h @ self.w(p + "g_proj.weight").T)
        return o @ self.w(p + "o_proj.weight").T

    # ---- feed-forward
    def mlp(self, x: torch.Tensor, prefix: str) -> torch.Tensor:
        a = x @ self.w(prefix + "gate_proj.weight").T
        b = x @ self.w(prefix + "up_proj.weight").T
        return self.act(a, b) @ self.w(prefix + "down_proj.weight").T

    def route(self, L: int, h: torch.Tensor):
        p = f"model.layers.{L}.block_sparse_moe.gate."
        scores = torch.sigmoid(h @ self.w(p + "weight").T)
        choice = scores + self.w(p + "e_score_correction_bias")[None, :]  # selects, never weighs
        idx = choice.topk(self.top_k, -1)[1]
        srt = choice.sort(-1, descending=True)[0]
        margin = srt[:, self.top_k - 1] - srt[:, self.top_k]
        wts = scores.gather(1, idx)
        if self.renorm:
            wts = wts / (wts.sum(-1, keepdim=True) + 1e-20)
        return idx, wts * self.routed_scale, margin

    def moe(self, L: int, h: torch.Tensor, trace) -> torch.Tensor:
        p = f"model.layers.{L}.block_sparse_moe."
        idx, wts, margin = self.route(L, h)
        xin = h @ self.w(p + "routed_expert_down_proj.weight").T if self.latent else h
        y = torch.zeros_like(xin)
        for t in range(h.shape[0]):
            for j in range(self.top_k):
                e = self.expert(L, int(idx[t, j]))
                y[t] += wts[t, j] * (self.act(xin[t] @ e["gate"].T, xin[t] @ e["up"].T) @ e["down"].T)
        if self.latent:
            if self.latent_norm:
                y = rms_norm(y, self.w(p + "routed_expert_norm.weight"), self.eps)
            y = y @ self.w(p + "routed_expert_up_proj.weight").T
        if trace is not None:
            trace.append({"layer": L, "experts": idx.tolist(), "margin": margin.tolist()})
        return y + self.mlp(h, p + "shared_experts.")  # shared experts on the full hidden state

    # ---- the model
    @torch.no_grad()
    def forward(self, ids, state: State, trace: dict | None = None) -> torch.Tensor:
        """Logits [T, vocab] for `ids`, continuing `state`. trace, if given,
        receives "routing" (per MoE layer: the experts and the k-th vs
        (k+1)-th biased-score margin of every token) and "hidden" (the last
        token's residual stream after every layer: with Attention Residuals
        the running sum of the current block, which is what the next layer
        carries)."""
        ids = torch.as_tensor(list(ids), dtype=torch.long)
        T, pos0 = ids.shape[0], state.pos
        x = self.w("model.embed_tokens.weight")[ids]
        routing = [] if trace is not None else None
        hidden = [] if trace is not None else None
        # Attention Residuals: `blocks` holds the finished block representations
        # (the embedding first), `partial` the sum of the current block's
        # sublayer outputs; a sublayer reads the softmax mix of all of them.
        blocks, partial = [], x
        for L in range(self.n_layers):
            pre = f"model.layers.{L}."
            st = state.layers[L]
            if self.block:
                hin = x if not blocks else attn_res(blocks, partial, self.w(pre + "self_attention_res_norm.weight"),
                                                    self.w(pre + "self_attention_res_proj.weight"), self.eps)
                if L % self.block == 0:  # a new block starts here: the running sum is finished
                    blocks.append(partial)
                    partial = None
            else:
                hin = x
            h = rms_norm(hin, self.w(pre + "input_layernorm.weight"), self.eps)
            a = self.kda(L, h, st) if L in self.kda_layers else self.mla(L, h, st, pos0)
            if self.block:
                partial = a if partial is None else partial + a
                hin = attn_res(blocks, partial, self.w(pre + "mlp_res_norm.weight"),
                               self.w(pre + "mlp_res_proj.weight"), self.eps)
            else:
                x = x + a
                hin = x
            h = rms_norm(hin, self.w(pre + "post_attention_layernorm.weight"), self.eps)
            f = self.moe(L, h, routing) if L >= self.first_dense else self.mlp(h, pre + "mlp.")
            if self.block:
                partial = partial + f
            else:
                x = x + f
            if hidden is not None:
                hidden.append((partial if self.block else x)[-1].clone())
        if self.block:
            x = attn_res(blocks, partial, self.w("model.output_attn_res_norm.weight"),
                         self.w("model.output_attn_res_proj.weight"), self.eps)
        state.pos += T
        x = rms_norm(x, self.w("model.norm.weight"), self.eps)
        if trace is not None:
            trace["routing"] = routing
            trace["hidden"] = torch.stack(hidden)
        return x @ self.w("lm_head.weight").T
