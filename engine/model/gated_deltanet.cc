// Gated DeltaNet (Qwen3-Next's linear attention) with its short convolution:
// a layer's tensors, its session state and a chunk's steps (GatedDeltaNetLayer).
// transformers' Qwen3NextGatedDeltaNet, token by token (the projections
// over the whole chunk at once):
//   q, k, v, z from in_proj_qkvz and b, a from in_proj_ba (grouped per key
//   head, TrunkSpec); a causal depthwise conv over the q, k, v channels
//   (tap kernel-1 on the current token), SiLU; per value head
//   decay = exp(-exp(A_log) * softplus(a + dt_bias)), beta = sigmoid(b);
//   q, k L2-normalized (fla's l2norm), q scaled by k_dim^-0.5; the delta
//   rule (kernels::GatedDeltaStateStep) with the key head's q and k; then
//   RMSNorm(o) * norm * silu(z) per value head, and out_proj.

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/kernels/recurrence.h"
#include "engine/model/layer.h"
#include "engine/model/norms.h"

namespace waste {
namespace {

// The layout of in_proj_qkvz and in_proj_ba is TrunkSpec's.
struct GatedDeltaNetWeights {
  const kernels::MatrixView *qkvz = nullptr, *ba = nullptr, *out = nullptr;
  const float* conv = nullptr;     // [gdn_conv_width][kernel]: q, k, then v channels
  const float* a_log = nullptr;    // [value heads]
  const float* dt_bias = nullptr;  // [value heads]
  const float* norm = nullptr;     // [gdn_v_dim]: the gated output norm's weight
};

// `a`: the layer's "model.layers.L.linear_attn.".
GatedDeltaNetWeights ResolveGatedDeltaNet(const Trunk& t, const std::string& a) {
  GatedDeltaNetWeights w;
  w.qkvz = &t.Matrix(a + "in_proj_qkvz.weight");
  w.ba = &t.Matrix(a + "in_proj_ba.weight");
  w.out = &t.Matrix(a + "out_proj.weight");
  w.conv = t.Vector(a + "conv1d.weight");
  w.a_log = t.Vector(a + "A_log");
  w.dt_bias = t.Vector(a + "dt_bias");
  w.norm = t.Vector(a + "norm.weight");
  return w;
}

class GatedDeltaNetLayer : public AttentionLayer {
 public:
  GatedDeltaNetLayer(int L, const GatedDeltaNetWeights& w) : L_(L), w_(w) {}
  void Run(LayerContext& ctx, std::span<Session* const> owner, std::span<const int> positions,
           const float* h, float* out) override;
  // The recurrent state [value heads][k_dim][v_dim] and the conv ring
  // [kernel-1][gdn_conv_width], oldest first, then their spares.
  void PlaceState(const ModelConfig& c, Session& s, StateCarver& carve) const override {
    const size_t state = static_cast<size_t>(c.gdn_v_heads) * c.gdn_k_dim * c.gdn_v_dim;
    const size_t ring = static_cast<size_t>(c.conv_kernel - 1) * c.gdn_conv_width();
    carve.TakeRecurrent(s, L_, state, ring);
  }
  bool caches_positions() const override { return false; }

 private:
  const int L_;
  const GatedDeltaNetWeights w_;
};

void GatedDeltaNetLayer::Run(LayerContext& ctx, std::span<Session* const> owner,
                             std::span<const int> positions, const float* h, float* out) {
  const ModelConfig& c = ctx.c;
  const GatedDeltaNetWeights& l = w_;
  const int L = L_;
  const int Hk = c.gdn_k_heads, Hv = c.gdn_v_heads, Dk = c.gdn_k_dim, Dv = c.gdn_v_dim;
  const int r = Hv / Hk;  // value heads per key head
  const int K = c.gdn_key_width(), V = c.gdn_value_width(), C = c.gdn_conv_width();
  const int W = c.conv_kernel;
  const int group = 2 * Dk + 2 * r * Dv;  // one key head's rows of in_proj_qkvz
  const size_t T = positions.size(), hid = static_cast<size_t>(c.hidden);
  const size_t qkvz_len = static_cast<size_t>(2 * K + 2 * V), ba_len = 2 * static_cast<size_t>(Hv);
  std::vector<float> qkvz(T * qkvz_len), ba(T * ba_len), o(T * V);  // [T][...]
  // Three barriers for the chunk: both projections of every token's h in
  // one pass; then one pass over the key heads, each taking the chunk's
  // tokens in order: its convolution channels, normalization and value
  // heads (a key head's channels, value heads and states are its own, so
  // they stay in its thread's cache across the chunk; the same calls in
  // the same token order as one token at a time); then out_proj for every
  // token.
  const std::vector<const float*> hs = RowPointers(h, T, hid);
  ctx.MatVecsMany({{l.qkvz, hs, RowPointers(qkvz.data(), T, qkvz_len)},
               {l.ba, hs, RowPointers(ba.data(), T, ba_len)}});
  const size_t head_state = static_cast<size_t>(Dk) * Dv;
  const float scale = 1.f / std::sqrt(static_cast<float>(Dk));
  // The chunk works on the spares (model.h, Session), a session's first
  // token starting them from the committed state: its ring here, each key
  // head's states by the thread that steps it.
  for (size_t t = 0; t < T; ++t) {
    Session& s = *owner[t];
    if (positions[t] == s.position)
      std::copy(s.ring[L].begin(), s.ring[L].end(), s.ring_spare[L].begin());
  }
  ctx.pool.ParallelFor(Hk, 1, [&](int64_t g0, int64_t g1) {
    std::vector<float> x(2 * static_cast<size_t>(Dk) + static_cast<size_t>(r) * Dv), u(Dv),
        normed(Dv);
    for (int64_t g = g0; g < g1; ++g) {
      for (size_t t = 0; t < T; ++t) {
        Session& s = *owner[t];
        float* S = s.state_spare[L].data();
        float* ring = s.ring_spare[L].data();  // [W-1][C], oldest first
        if (positions[t] == s.position) {
          const float* committed = s.state[L].data();
          std::copy(committed + g * r * head_state, committed + (g + 1) * r * head_state,
                    S + g * r * head_state);
        }
        const float* ba_t = ba.data() + t * ba_len;
        float* o_t = o.data() + t * V;
        // The key head's conv channels: its q and k, then its value heads' v.
        const float* src = qkvz.data() + t * qkvz_len + g * group;
        const int64_t channel[3] = {g * Dk, K + g * Dk, 2 * K + g * r * Dv};
        const int width[3] = {Dk, Dk, r * Dv};
        float* xs = x.data();
        for (int p = 0; p < 3; ++p) {
          for (int i = 0; i < width[p]; ++i) {
            const int64_t ch = channel[p] + i;
            const float* w = l.conv + ch * W;
            const float cur = src[i];
            float acc = 0.f;
            for (int j = 0; j < W - 1; ++j) acc += w[j] * ring[static_cast<size_t>(j) * C + ch];
            acc += w[W - 1] * cur;
            for (int j = 0; j + 1 < W - 1; ++j)
              ring[static_cast<size_t>(j) * C + ch] = ring[static_cast<size_t>(j + 1) * C + ch];
            if (W > 1) ring[static_cast<size_t>(W - 2) * C + ch] = cur;
            xs[i] = Silu(acc);
          }
          src += width[p];
          xs += width[p];
        }
        const float* z = src;  // the value heads' z, after their v
        float* q = x.data();
        float* k = x.data() + Dk;
        L2Normalize(q, Dk);
        L2Normalize(k, Dk);
        for (int i = 0; i < Dk; ++i) q[i] *= scale;
        const float* bg = ba_t + g * 2 * r;  // b of the r value heads, then a
        for (int j = 0; j < r; ++j) {
          const int64_t hv = g * r + j;
          const float* v = x.data() + 2 * Dk + static_cast<size_t>(j) * Dv;
          const float decay =
              std::exp(-std::exp(l.a_log[hv]) * Softplus(bg[r + j] + l.dt_bias[hv]));
          float* oh = o_t + hv * Dv;
          kernels::GatedDeltaStateStep(S + hv * head_state, Dk, Dv, decay, k, v, Sigmoid(bg[j]),
                                       q, u.data(), oh, ctx.opt.isa);
          RmsNorm(oh, l.norm, Dv, c.rms_eps, normed.data());
          const float* zh = z + static_cast<size_t>(j) * Dv;
          for (int i = 0; i < Dv; ++i) oh[i] = normed[i] * Silu(zh[i]);
        }
      }
    }
  });
  ctx.MatVecMany(*l.out, RowPointers<const float>(o.data(), T, static_cast<size_t>(V)),
             RowPointers(out, T, hid));
}

}  // namespace

std::unique_ptr<AttentionLayer> MakeGatedDeltaNet(const LayerBuild& b) {
  return std::make_unique<GatedDeltaNetLayer>(b.layer,
                                              ResolveGatedDeltaNet(b.t, b.prefix + "linear_attn."));
}

}  // namespace waste
