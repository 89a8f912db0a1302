// Grouped-query attention with a K/V cache: a GQA layer's tensors, its
// rotation and softmax scale, its session state and a chunk's attention
// (GqaLayer).
//
// For the chunk: q, k, v projections of every token's h in one pass (plus
// their biases); k's heads normed (qk_norm; MiniMax-M2 norms all of k at once,
// and all of q here too) and rotated, then written with v to the cache row of
// the token's position. Then token after token
// (GqaLayer::Heads), per query head, on one thread: its q normed and rotated,
// scores against the keys of its K/V head at every position up to pos (the
// latest `window` of them on a sliding layer), softmax (with the head's sink
// logit in the denominator, GPT-OSS), and the weighted sum of the values;
// times sigmoid of the head's gate values with the output gate (Qwen3-Next);
// then o_proj over the chunk (plus its bias).

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/kernels/recurrence.h"
#include "engine/model/layer.h"
#include "engine/model/norms.h"

namespace waste {
namespace {

void AddBias(float* x, const float* bias, int n) {
  if (!bias) return;
  for (int i = 0; i < n; ++i) x[i] += bias[i];
}

// One query head q[D] against the first n rows of a K/V cache (`keys`:
// its K/V head's keys in row 0, `row` floats apart, the values `kv_width`
// after them): scores times `scale`, softmax, and the weighted sum of the
// values into out[D]. `sink`, when not null, is one more logit in the
// softmax with no value (GPT-OSS). score: [n] scratch.
void AttendHead(const float* q, const float* keys, size_t row, size_t kv_width, int n, int D,
                float scale, const float* sink, float* score, float* out, kernels::Isa isa) {
  float mx = sink ? *sink : -INFINITY;
  // Each position's key as a one-row F32 matrix: its dot with q is the SIMD
  // product's, one order on every thread and chunk.
  kernels::MatrixView key;
  key.fmt = format::Fmt::kF32;
  key.rows = 1;
  key.cols = D;
  for (int t = 0; t < n; ++t) {
    key.payload = reinterpret_cast<const uint8_t*>(keys + static_cast<size_t>(t) * row);
    kernels::MatVec(key, q, score + t, 0, 1, isa);
    score[t] *= scale;
    mx = std::max(mx, score[t]);
  }
  float sum = 0.f;
  for (int t = 0; t < n; ++t) sum += score[t] = std::exp(score[t] - mx);
  if (sink) sum += std::exp(*sink - mx);
  for (int t = 0; t < n; ++t) score[t] /= sum;
  kernels::WeightedRowSum(score, keys + kv_width, n, static_cast<int64_t>(row), D, out, isa);
}

// The optional tensors are null when the config has none.
struct GqaWeights {
  const kernels::MatrixView *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  const float *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr;  // attention_bias
  // qk_norm: [head_dim], or [q_width] and [kv_width] with qk_norm_all_heads
  const float *q_norm = nullptr, *k_norm = nullptr;
  const float* o_bias = nullptr;  // o_bias: [hidden]
  const float* sinks = nullptr;   // sinks: [n_heads], a logit in each head's softmax
  int window = 0;                 // the layer's attn_window (set by MakeGqa); 0: all
};

// `a`: the layer's attention prefix, "model.layers.L.self_attn.".
GqaWeights ResolveGqa(const Trunk& t, const ModelConfig& c, const std::string& a) {
  GqaWeights w;
  w.q = &t.Matrix(a + "q_proj.weight");
  w.k = &t.Matrix(a + "k_proj.weight");
  w.v = &t.Matrix(a + "v_proj.weight");
  w.o = &t.Matrix(a + "o_proj.weight");
  if (c.attn_bias) {
    w.q_bias = t.Vector(a + "q_proj.bias");
    w.k_bias = t.Vector(a + "k_proj.bias");
    w.v_bias = t.Vector(a + "v_proj.bias");
  }
  if (c.qk_norm) {
    w.q_norm = t.Vector(a + "q_norm.weight");
    w.k_norm = t.Vector(a + "k_norm.weight");
  }
  if (c.o_bias) w.o_bias = t.Vector(a + "o_proj.bias");
  if (c.sinks) w.sinks = t.Vector(a + "sinks");
  return w;
}

class GqaLayer : public AttentionLayer {
 public:
  GqaLayer(int L, const GqaWeights& w) : L_(L), w_(w) {}
  void Run(LayerContext& ctx, std::span<Session* const> owner, std::span<const int> positions,
           const float* h, float* out) override;
  // The K/V cache [max_context][2 (k, v)][kv_width] (k normed, rotated).
  void PlaceState(const ModelConfig& c, Session& s, StateCarver& carve) const override {
    s.cache[L_] = carve.Take(static_cast<size_t>(s.max_context) * 2 * c.kv_width());
  }
  bool caches_positions() const override { return true; }

 private:
  // One token's heads after its projections: q [n_heads][head_dim, or
  // twice that with the output gate] (normed and rotated here), the
  // session's K/V cache filled up to pos; o [n_heads * head_dim].
  void Heads(LayerContext& ctx, Session& s, int pos, float* q, float* o);

  const int L_;
  const GqaWeights w_;
};

}  // namespace

Rotary GqaRotary(const ModelConfig& c) {
  Rotary r = MakeRotary(c.rotary_dim, c.rope_theta, c.yarn);
  r.rotate_half = true;
  // HF's YaRN for these models scales cos and sin by its attention factor,
  // not the softmax: mscale(factor, mscale) / mscale(factor, mscale_all_dim)
  // when both are set, else mscale(factor).
  r.softmax_factor = 1.f;
  const YarnConfig& y = c.yarn;
  if (y.factor > 1.0) {
    auto mscale = [&](double m) { return 0.1 * m * std::log(y.factor) + 1.0; };
    const double f = y.mscale > 0 && y.mscale_all_dim > 0
                         ? mscale(y.mscale) / mscale(y.mscale_all_dim)
                         : mscale(1.0);
    r.cos_sin_factor = static_cast<float>(f);
  }
  return r;
}

float GqaSoftmaxScale(const ModelConfig& c) {
  return 1.f / std::sqrt(static_cast<float>(c.head_dim));
}

void GqaLayer::Run(LayerContext& ctx, std::span<Session* const> owner,
                   std::span<const int> positions, const float* h, float* out) {
  const ModelConfig& c = ctx.c;
  const GqaWeights& l = w_;
  const int L = L_;
  const int H = c.n_heads, KV = c.n_kv_heads, D = c.head_dim;
  const size_t kvw = static_cast<size_t>(c.kv_width()), row = 2 * kvw;
  const size_t T = positions.size(), hid = static_cast<size_t>(c.hidden);
  // With the output gate, q_proj's rows per head are its query, then its gate.
  const size_t q_len = static_cast<size_t>(H) * (c.attn_output_gate ? 2 * D : D);
  const size_t o_len = static_cast<size_t>(c.q_width());
  std::vector<float> q(T * q_len), o(T * o_len);  // [T][...]
  // Each token's key and value go straight to its session's cache row.
  std::vector<float*> ks(T), vs(T);
  for (size_t t = 0; t < T; ++t) {
    ks[t] = owner[t]->cache[L].data() + static_cast<size_t>(positions[t]) * row;
    vs[t] = ks[t] + kvw;
  }
  // The chunk's projections, each matrix read once for all its tokens.
  const std::vector<const float*> hs = RowPointers(h, T, hid);
  ctx.MatVecsMany({{l.q, hs, RowPointers(q.data(), T, q_len)}, {l.k, hs, ks}, {l.v, hs, vs}});
  // Every token's key and value in place first: token t reads positions up
  // to its own only, so later tokens' rows change nothing.
  for (size_t t = 0; t < T; ++t) {
    AddBias(q.data() + t * q_len, l.q_bias, c.q_width());  // no bias with the output gate
    AddBias(ks[t], l.k_bias, static_cast<int>(kvw));
    AddBias(vs[t], l.v_bias, static_cast<int>(kvw));
    if (c.qk_norm_all_heads) {  // one norm over all the heads, before they split
      float* qt = q.data() + t * q_len;
      RmsNorm(qt, l.q_norm, c.q_width(), c.rms_eps, qt);
      RmsNorm(ks[t], l.k_norm, static_cast<int>(kvw), c.rms_eps, ks[t]);
    }
    // The keys, once for the query heads that share them.
    for (int g = 0; g < KV; ++g) {
      float* kg = ks[t] + static_cast<size_t>(g) * D;
      if (l.k_norm && !c.qk_norm_all_heads) RmsNorm(kg, l.k_norm, D, c.rms_eps, kg);
      ctx.rotary.Apply(kg, positions[t]);
    }
  }
  for (size_t t = 0; t < T; ++t)
    Heads(ctx, *owner[t], positions[t], q.data() + t * q_len, o.data() + t * o_len);
  ctx.MatVecMany(*l.o, RowPointers<const float>(o.data(), T, o_len), RowPointers(out, T, hid));
  for (size_t t = 0; t < T; ++t) AddBias(out + t * hid, l.o_bias, c.hidden);
}

void GqaLayer::Heads(LayerContext& ctx, Session& s, int pos, float* q, float* o) {
  const ModelConfig& c = ctx.c;
  const GqaWeights& l = w_;
  const int L = L_;
  const int H = c.n_heads, D = c.head_dim, group = H / c.n_kv_heads;
  const size_t kvw = static_cast<size_t>(c.kv_width()), row = 2 * kvw;
  const int qstride = c.attn_output_gate ? 2 * D : D;
  // The keys it sees: the window's latest positions, or all of them.
  const int first = l.window > 0 ? std::max(0, pos + 1 - l.window) : 0;
  const int n = pos + 1 - first;
  const float* rows = s.cache[L].data() + static_cast<size_t>(first) * row;
  ctx.pool.ParallelFor(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> score(n);
    for (int64_t hd = h0; hd < h1; ++hd) {
      float* qh = q + hd * qstride;
      if (l.q_norm && !c.qk_norm_all_heads) RmsNorm(qh, l.q_norm, D, c.rms_eps, qh);
      ctx.rotary.Apply(qh, pos);
      const float* keys = rows + static_cast<size_t>(hd / group) * D;  // its K/V head's
      AttendHead(qh, keys, row, kvw, n, D, ctx.softmax_scale, l.sinks ? &l.sinks[hd] : nullptr,
                 score.data(), o + hd * D, ctx.opt.isa);
      if (c.attn_output_gate) {
        float* oh = o + hd * D;
        for (int i = 0; i < D; ++i) oh[i] *= Sigmoid(qh[D + i]);
      }
    }
  });
}

std::unique_ptr<AttentionLayer> MakeGqa(const LayerBuild& b) {
  const ModelConfig& c = b.c;
  const std::string a = b.prefix + "self_attn.";
  GqaWeights w = ResolveGqa(b.t, c, a);
  w.window = c.attn_window[static_cast<size_t>(b.layer)];
  if (c.zero_centered_norms && c.qk_norm) {  // Qwen3-Next's q_norm and k_norm too
    w.q_norm = b.norms.Get(a + "q_norm.weight", c.head_dim);
    w.k_norm = b.norms.Get(a + "k_norm.weight", c.head_dim);
  }
  return std::make_unique<GqaLayer>(b.layer, w);
}

}  // namespace waste
