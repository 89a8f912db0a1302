// DeepSeek Sparse Attention's lightning indexer (transformers'
// DeepseekV32Indexer) and its top-k choice. Per token: queries
// wq_b(q latent) [heads][dim], a key LayerNorm(wk(h)) [dim], both rotated on
// their first qk_rope dims (rotate-half for V3.2); head weights
// weights_proj(h) * heads^-0.5. A position's score is
// sum_h w_h * relu(q_h . k_t * dim^-0.5); MLA attends the topk best.
// transformers' Hadamard-free form is the reference: the released code's
// rotation is orthogonal and its FP8 scoring a precision choice.

#include "engine/model/dsa.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/model/layer.h"

namespace waste {
namespace {

// The indexer's key norm is a LayerNorm built with eps 1e-6.
constexpr float kKeyNormEps = 1e-6f;

void LayerNorm(const float* x, const float* w, const float* b, int n, float* y) {
  double sum = 0, ss = 0;
  for (int i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / n;
  for (int i = 0; i < n; ++i) ss += (x[i] - mean) * (x[i] - mean);
  const float inv = 1.f / std::sqrt(static_cast<float>(ss / n) + kKeyNormEps);
  const float m = static_cast<float>(mean);
  for (int i = 0; i < n; ++i) y[i] = (x[i] - m) * inv * w[i] + b[i];
}

}  // namespace

void DsaSelect(std::span<const float> scores, int topk, std::vector<char>& keep) {
  const size_t n = scores.size();
  keep.assign(n, 1);
  if (n <= static_cast<size_t>(topk)) return;
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  // A strict total order (score down, position up), so the chosen set is one.
  std::nth_element(order.begin(), order.begin() + topk, order.end(), [&](int a, int b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  std::fill(keep.begin(), keep.end(), 0);
  for (int i = 0; i < topk; ++i) keep[order[i]] = 1;
}

DsaIndexer::DsaIndexer(const Trunk& t, const std::string& a)
    : wq_b_(&t.Matrix(a + "indexer.wq_b.weight")),
      wk_(&t.Matrix(a + "indexer.wk.weight")),
      weights_(&t.Matrix(a + "indexer.weights_proj.weight")),
      k_norm_(t.Vector(a + "indexer.k_norm.weight")),
      k_bias_(t.Vector(a + "indexer.k_norm.bias")) {}

Rotary DsaIndexer::Rotation(const LayerContext& ctx) {
  Rotary r = ctx.rotary;  // MLA's frequencies, MLA's cos and sin
  r.rotate_half = ctx.c.index_rotate_half;
  r.cos_sin_factor = 1.f;
  return r;
}

void DsaIndexer::Project(LayerContext& ctx, std::span<const float* const> hs,
                         std::span<const float* const> q_latents, std::span<const int> positions,
                         std::span<float* const> keys, std::vector<float>& q,
                         std::vector<float>& w) const {
  const ModelConfig& c = ctx.c;
  const size_t T = hs.size(), ql = static_cast<size_t>(c.index_heads) * c.index_dim;
  const int dim = c.index_dim;
  q.resize(T * ql);
  w.resize(T * c.index_heads);
  std::vector<float> k(T * dim);  // [T][dim] before its norm
  ctx.MatVecsMany({{wk_, hs, RowPointers(k.data(), T, dim)},
                   {weights_, hs, RowPointers(w.data(), T, c.index_heads)}});
  ctx.MatVecMany(*wq_b_, q_latents, RowPointers(q.data(), T, ql));
  const Rotary r = Rotation(ctx);
  const float head_scale = 1.f / std::sqrt(static_cast<float>(c.index_heads));
  for (size_t t = 0; t < T; ++t) {
    LayerNorm(k.data() + t * dim, k_norm_, k_bias_, dim, keys[t]);
    r.Apply(keys[t], positions[t]);
    for (int h = 0; h < c.index_heads; ++h) {
      r.Apply(q.data() + t * ql + static_cast<size_t>(h) * dim, positions[t]);
      w[t * c.index_heads + h] *= head_scale;
    }
  }
}

void DsaIndexer::Select(LayerContext& ctx, const float* keys, int stride, int pos, const float* q,
                        const float* w, std::vector<char>& keep) const {
  const ModelConfig& c = ctx.c;
  const int n = pos + 1, heads = c.index_heads;
  if (n <= c.index_topk) {  // everything: no scores needed
    keep.assign(n, 1);
    return;
  }
  kernels::MatrixView qv;  // the token's queries [heads][dim]
  qv.fmt = format::Fmt::kF32;
  qv.rows = heads;
  qv.cols = c.index_dim;
  qv.payload = reinterpret_cast<const uint8_t*>(q);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.index_dim));
  std::vector<float> score(n);
  // A position's score by one thread, its heads summed in order.
  ctx.pool.ParallelFor(n, 64, [&](int64_t t0, int64_t t1) {
    std::vector<float> dots(heads);
    for (int64_t t = t0; t < t1; ++t) {
      kernels::MatVec(qv, keys + t * stride, dots.data(), 0, heads, ctx.opt.isa, ctx.opt.q4_input);
      float s = 0.f;
      for (int h = 0; h < heads; ++h) s += w[h] * std::max(dots[h] * scale, 0.f);
      score[t] = s;
    }
  });
  DsaSelect(score, c.index_topk, keep);
}

}  // namespace waste
