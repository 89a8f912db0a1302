// Kimi Delta Attention with its short convolutions: a KDA layer's tensors,
// its session state and a chunk's steps (KdaLayer).

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "engine/kernels/recurrence.h"
#include "engine/model/layer.h"
#include "engine/model/norms.h"

namespace waste {
namespace {

struct KdaWeights {
  const kernels::MatrixView *q = nullptr, *k = nullptr, *v = nullptr, *b = nullptr;
  // The output gate: g_a then g_b, or K3's full-rank g alone.
  const kernels::MatrixView *f_a = nullptr, *f_b = nullptr, *g_a = nullptr, *g_b = nullptr;
  const kernels::MatrixView *g = nullptr, *o = nullptr;
  const float* conv[3] = {};       // q, k, v: [C][kernel]
  const float* a_log = nullptr;    // [heads] (K3's padded to head_dim: the first heads read)
  const float* dt_bias = nullptr;  // [C]
  const float* o_norm = nullptr;   // [head_dim]
};

// `a`: the layer's attention prefix, "model.layers.L.self_attn.".
KdaWeights ResolveKda(const Trunk& t, const ModelConfig& c, const std::string& a) {
  KdaWeights w;
  w.q = &t.Matrix(a + "q_proj.weight");
  w.k = &t.Matrix(a + "k_proj.weight");
  w.v = &t.Matrix(a + "v_proj.weight");
  w.b = &t.Matrix(a + "b_proj.weight");
  w.f_a = &t.Matrix(a + "f_a_proj.weight");
  w.f_b = &t.Matrix(a + "f_b_proj.weight");
  if (c.kda_full_rank_gate) {
    w.g = &t.Matrix(a + "g_proj.weight");
  } else {
    w.g_a = &t.Matrix(a + "g_a_proj.weight");
    w.g_b = &t.Matrix(a + "g_b_proj.weight");
  }
  w.o = &t.Matrix(a + "o_proj.weight");
  w.conv[0] = t.Vector(a + "q_conv1d.weight");
  w.conv[1] = t.Vector(a + "k_conv1d.weight");
  w.conv[2] = t.Vector(a + "v_conv1d.weight");
  w.a_log = t.Vector(a + "A_log");
  w.dt_bias = t.Vector(a + "dt_bias");
  w.o_norm = t.Vector(a + "o_norm.weight");
  return w;
}

class KdaLayer : public AttentionLayer {
 public:
  KdaLayer(int L, const KdaWeights& w) : L_(L), w_(w) {}
  void Run(LayerContext& ctx, std::span<Session* const> owner, std::span<const int> positions,
           const float* h, float* out) override;
  // The recurrent state [heads][head_dim (k)][head_dim (v)] and the conv
  // ring [3 (q,k,v)][kernel-1][kda_width], oldest first, then their spares.
  void PlaceState(const ModelConfig& c, Session& s, StateCarver& carve) const override {
    const size_t state = static_cast<size_t>(c.kda_heads) * c.kda_head_dim * c.kda_head_dim;
    const size_t ring = static_cast<size_t>(3) * (c.conv_kernel - 1) * c.kda_width();
    carve.TakeRecurrent(s, L_, state, ring);
  }
  bool caches_positions() const override { return false; }

 private:
  const int L_;
  const KdaWeights w_;
};

void KdaLayer::Run(LayerContext& ctx, std::span<Session* const> owner,
                   std::span<const int> positions, const float* h, float* out) {
  const ModelConfig& c = ctx.c;
  const KdaWeights& l = w_;
  const int L = L_;
  const int H = c.kda_heads, D = c.kda_head_dim, C = H * D, K = c.conv_kernel;
  const size_t T = positions.size(), hid = static_cast<size_t>(c.hidden);
  // Per token: qkv [3C], f [D], fg [C], ga [D], gate [C], beta [H], o [C].
  std::vector<float> qkv(T * 3 * C), f(T * D), fg(T * C), ga(T * D), gate(T * C), beta(T * H),
      o(T * C);
  // Three barriers for the chunk: every projection of every token's h in
  // one pass (each block of rows applied to all the tokens while it is in
  // cache); then one pass over the heads, each head taking the chunk's
  // tokens in order: its low-rank second halves, convolutions and
  // recurrence (a head's rows of f_b and g_b, its conv channels and its
  // state are its own, so its state stays in its thread's cache across the
  // chunk); then o for every token. A row of a product is one MatVec's bits
  // whatever the tokens and rows beside it, and each head's steps are the
  // same calls in the same token order as one token at a time.
  // K3's full-rank gate is one more product of h, the whole gate at once.
  const auto at = [&](float* base, size_t step) { return RowPointers(base, T, step); };
  const std::vector<const float*> hs = RowPointers(h, T, hid);
  const std::vector<float*> qs = at(qkv.data(), 3 * C), ks = at(qkv.data() + C, 3 * C),
                            vs = at(qkv.data() + 2 * C, 3 * C), fs = at(f.data(), D),
                            betas = at(beta.data(), H), gates = at(gate.data(), C),
                            gas = at(ga.data(), D);
  ctx.MatVecsMany({{l.q, hs, qs},
               {l.k, hs, ks},
               {l.v, hs, vs},
               {l.f_a, hs, fs},
               {l.b, hs, betas},
               {l.g ? l.g : l.g_a, hs, l.g ? gates : gas}});
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  // The chunk works on the spares (model.h, Session), a session's first
  // token starting them from the committed state: its ring here, each
  // head's state by the thread that steps it.
  for (size_t t = 0; t < T; ++t) {
    Session& s = *owner[t];
    if (positions[t] == s.position)
      std::copy(s.ring[L].begin(), s.ring[L].end(), s.ring_spare[L].begin());
  }
  ctx.pool.ParallelFor(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> u(D), decay(D), normed(D);
    for (int64_t hd = h0; hd < h1; ++hd) {
      for (size_t t = 0; t < T; ++t) {
        Session& s = *owner[t];
        float* S = s.state_spare[L].data();
        float* ring = s.ring_spare[L].data();
        if (positions[t] == s.position) {
          const float* committed = s.state[L].data();
          std::copy(committed + hd * D * D, committed + (hd + 1) * D * D, S + hd * D * D);
        }
        float* qkv_t = qkv.data() + t * 3 * C;
        const float* f_t = f.data() + t * D;
        const float* ga_t = ga.data() + t * D;
        float* fg_t = fg.data() + t * C;
        float* gate_t = gate.data() + t * C;
        const float* beta_t = beta.data() + t * H;
        float* o_t = o.data() + t * C;
        kernels::MatVec(*l.f_b, f_t, fg_t, hd * D, (hd + 1) * D, ctx.opt.isa, ctx.opt.q4_input);
        if (l.g_b)
          kernels::MatVec(*l.g_b, ga_t, gate_t, hd * D, (hd + 1) * D, ctx.opt.isa,
                          ctx.opt.q4_input);
        // Short causal convolutions of the head's channels, then SiLU. The
        // ring holds the K-1 previous projections, oldest first; tap K-1
        // multiplies the current one.
        for (int p = 0; p < 3; ++p) {
          float* r = ring + static_cast<size_t>(p) * (K - 1) * C;
          float* x = qkv_t + static_cast<size_t>(p) * C;
          const float* w = l.conv[p];
          for (int64_t ch = hd * D; ch < (hd + 1) * D; ++ch) {
            float acc = 0.f;
            for (int i = 0; i < K - 1; ++i) acc += w[ch * K + i] * r[static_cast<size_t>(i) * C + ch];
            acc += w[ch * K + K - 1] * x[ch];
            for (int i = 0; i + 1 < K - 1; ++i)
              r[static_cast<size_t>(i) * C + ch] = r[static_cast<size_t>(i + 1) * C + ch];
            if (K > 1) r[static_cast<size_t>(K - 2) * C + ch] = x[ch];
            x[ch] = Silu(acc);
          }
        }
        float* q = qkv_t + hd * D;
        float* k = qkv_t + C + hd * D;
        const float* v = qkv_t + 2 * C + hd * D;
        L2Normalize(q, D);
        L2Normalize(k, D);
        for (int i = 0; i < D; ++i) q[i] *= scale;
        const float a = std::exp(l.a_log[hd]), lb = c.kda_lower_bound;
        for (int i = 0; i < D; ++i)
          decay[i] = std::exp(KdaLogDecay(a, fg_t[hd * D + i] + l.dt_bias[hd * D + i], lb));
        const float b = Sigmoid(beta_t[hd]);
        float* oh = o_t + hd * D;
        kernels::KdaStateStep(S + hd * D * D, D, decay.data(), k, v, b, q, u.data(), oh,
                              ctx.opt.isa);
        // Gated output norm, per head.
        RmsNorm(oh, l.o_norm, D, c.rms_eps, normed.data());
        for (int j = 0; j < D; ++j) oh[j] = normed[j] * Sigmoid(gate_t[hd * D + j]);
      }
    }
  });
  ctx.MatVecMany(*l.o, RowPointers<const float>(o.data(), T, C), at(out, hid));
}

}  // namespace

std::unique_ptr<AttentionLayer> MakeKda(const LayerBuild& b) {
  return std::make_unique<KdaLayer>(b.layer, ResolveKda(b.t, b.c, b.prefix + "self_attn."));
}

}  // namespace waste
