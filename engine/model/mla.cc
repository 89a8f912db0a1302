// Multi-head latent attention, absorbed: an MLA layer's tensors, its rotation
// and softmax scale, its session state and a chunk's attention (MlaLayer).

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "engine/kernels/recurrence.h"
#include "engine/model/layer.h"
#include "engine/model/norms.h"

namespace waste {
namespace {

// The latent projections' norms are built without an eps in every reference
// (HF DeepseekV3, HF KimiLinear, Moonshot's code), so they take RMSNorm's
// default, whatever rms_norm_eps says.
constexpr float kLatentNormEps = 1e-6f;

// f16 scales per row of a trunk matrix (none for F32 and F16).
int64_t ScalesPerRow(const kernels::MatrixView& w) {
  return w.group > 0 ? (w.cols + w.group - 1) / w.group : 0;
}

struct MlaWeights {
  // The query: q_a, its norm and q_b when c.q_lora > 0, else q_proj.
  const kernels::MatrixView *q_a = nullptr, *q_b = nullptr, *q_proj = nullptr;
  const float* q_a_norm = nullptr;
  const kernels::MatrixView *kv_a = nullptr, *kv_b = nullptr;
  const float* kv_a_norm = nullptr;
  const kernels::MatrixView* g = nullptr;  // mla_output_gate: the heads' output gate; else null
  const kernels::MatrixView* o = nullptr;
};

// `a`: the layer's attention prefix, "model.layers.L.self_attn.".
MlaWeights ResolveMla(const Trunk& t, const ModelConfig& c, const std::string& a) {
  MlaWeights w;
  if (c.q_lora > 0) {
    w.q_a = &t.Matrix(a + "q_a_proj.weight");
    w.q_a_norm = t.Vector(a + "q_a_layernorm.weight");
    w.q_b = &t.Matrix(a + "q_b_proj.weight");
  } else {
    w.q_proj = &t.Matrix(a + "q_proj.weight");
  }
  w.kv_a = &t.Matrix(a + "kv_a_proj_with_mqa.weight");
  w.kv_a_norm = t.Vector(a + "kv_a_layernorm.weight");
  // Its key rows are also used transposed (absorbed into the query), read
  // in place by kernels::WeightedRows.
  w.kv_b = &t.Matrix(a + "kv_b_proj.weight");
  if (c.mla_output_gate) w.g = &t.Matrix(a + "g_proj.weight");
  w.o = &t.Matrix(a + "o_proj.weight");
  return w;
}

class MlaLayer : public AttentionLayer {
 public:
  MlaLayer(int L, const MlaWeights& w, std::optional<DsaIndexer> indexer)
      : L_(L), w_(w), indexer_(std::move(indexer)) {}
  void Run(LayerContext& ctx, std::span<Session* const> owner, std::span<const int> positions,
           const float* h, float* out) override;
  // The latent cache [max_context][mla_row]: kv_lora + qk_rope (k_pe
  // rotated), then DSA's index key.
  void PlaceState(const ModelConfig& c, Session& s, StateCarver& carve) const override {
    s.cache[L_] = carve.Take(static_cast<size_t>(s.max_context) * c.mla_row(L_));
  }
  bool caches_positions() const override { return true; }

 private:
  // One token's heads after its projections: q [n_heads][qk_nope + qk_rope]
  // (rotated here), gate [n_heads * v_head] (K3's, else unused), the
  // session's latent cache filled up to pos; keep: the positions DSA
  // attends (empty: all); o [n_heads * v_head].
  void Heads(LayerContext& ctx, Session& s, int pos, float* q, const float* gate,
             const std::vector<char>& keep, float* o);

  const int L_;
  const MlaWeights w_;
  const std::optional<DsaIndexer> indexer_;  // DSA's (V3.2, GLM-5), else none
};

}  // namespace

Rotary MlaRotary(const ModelConfig& c) {
  // DeepSeek-V3: YaRN on the rope dims; Kimi-Linear (mla_use_nope): none.
  if (c.mla_nope || c.qk_rope == 0) return {};
  return MakeRotary(c.qk_rope, c.rope_theta, c.yarn);
}

float MlaSoftmaxScale(const ModelConfig& c, const Rotary& r) {
  return 1.f / std::sqrt(static_cast<float>(c.qk_nope + c.qk_rope)) * r.softmax_factor;
}

void MlaLayer::Run(LayerContext& ctx, std::span<Session* const> owner,
                   std::span<const int> positions, const float* h, float* out) {
  const ModelConfig& c = ctx.c;
  const MlaWeights& l = w_;
  const int L = L_;
  const int nh = c.n_heads, nope = c.qk_nope, rope = c.qk_rope, vd = c.v_head, lat = c.kv_lora;
  const int qd = nope + rope, row = c.mla_row(L);
  const size_t T = positions.size(), hid = static_cast<size_t>(c.hidden);
  const size_t q_len = static_cast<size_t>(nh) * qd, gate_len = l.g ? static_cast<size_t>(nh) * vd : 0;
  // [T][...]: each token's query, latent key row and (K3) output gate.
  std::vector<float> q(T * q_len), ckv(T * (lat + rope)), gate(T * gate_len);
  const std::vector<const float*> hs = RowPointers(h, T, hid);
  const std::vector<float*> qs = RowPointers(q.data(), T, q_len),
                            ckvs = RowPointers(ckv.data(), T, static_cast<size_t>(lat + rope)),
                            gates = RowPointers(gate.data(), T, gate_len);
  // The chunk's projections, each matrix read once for all its tokens; the
  // query's first projection, kv_a and K3's output gate read the same h.
  const auto project = [&](const kernels::MatrixView* first, std::span<float* const> firsts) {
    if (l.g)
      ctx.MatVecsMany({{first, hs, firsts}, {l.kv_a, hs, ckvs}, {l.g, hs, gates}});
    else
      ctx.MatVecsMany({{first, hs, firsts}, {l.kv_a, hs, ckvs}});
  };
  // The cache rows of the chunk's tokens, each in its session's cache.
  std::vector<float*> rows(T);
  for (size_t t = 0; t < T; ++t)
    rows[t] = owner[t]->cache[L].data() + static_cast<size_t>(positions[t]) * row;
  std::vector<float> iq, iw;  // DSA: the indexer's queries and head weights
  if (l.q_a) {
    const size_t ql = static_cast<size_t>(c.q_lora);
    std::vector<float> qa(T * ql), qn(T * ql);
    project(l.q_a, RowPointers(qa.data(), T, ql));
    for (size_t t = 0; t < T; ++t)
      RmsNorm(qa.data() + t * ql, l.q_a_norm, c.q_lora, kLatentNormEps, qn.data() + t * ql);
    const std::vector<const float*> qns = RowPointers<const float>(qn.data(), T, ql);
    ctx.MatVecMany(*l.q_b, qns, qs);
    if (indexer_) {
      std::vector<float*> keys(T);
      for (size_t t = 0; t < T; ++t) keys[t] = rows[t] + lat + rope;
      indexer_->Project(ctx, hs, qns, positions, keys, iq, iw);
    }
  } else {
    project(l.q_proj, qs);
  }
  // Every token's latent row into its session's cache first: token t reads
  // rows [0, positions[t]] only, so later tokens' rows change nothing.
  for (size_t t = 0; t < T; ++t) {
    float* cache = rows[t];
    RmsNorm(ckvs[t], l.kv_a_norm, lat, kLatentNormEps, cache);
    std::copy(ckvs[t] + lat, ckvs[t] + lat + rope, cache + lat);
    ctx.rotary.Apply(cache + lat, positions[t]);
  }
  const size_t o_len = static_cast<size_t>(nh) * vd;
  std::vector<float> o(T * o_len);  // [T][n_heads * v_head]
  // DSA's choice of positions per token (empty: all): this layer's
  // indexer's, kept for the layers that share it, or the last one's.
  const size_t iql = static_cast<size_t>(c.index_heads) * c.index_dim;
  if (indexer_) ctx.dsa_keep.resize(T);
  static const std::vector<char> kAll;  // no choice: every position
  for (size_t t = 0; t < T; ++t) {
    if (indexer_)
      indexer_->Select(ctx, owner[t]->cache[L].data() + lat + rope, row, positions[t],
                       iq.data() + t * iql, iw.data() + t * c.index_heads, ctx.dsa_keep[t]);
    const std::vector<char>& keep = c.index_topk > 0 ? ctx.dsa_keep[t] : kAll;
    Heads(ctx, *owner[t], positions[t], qs[t], gates[t], keep, o.data() + t * o_len);
  }
  ctx.MatVecMany(*l.o, RowPointers<const float>(o.data(), T, o_len), RowPointers(out, T, hid));
}

void MlaLayer::Heads(LayerContext& ctx, Session& s, int pos, float* q, const float* gate,
                     const std::vector<char>& keep, float* o) {
  const ModelConfig& c = ctx.c;
  const MlaWeights& l = w_;
  const int L = L_;
  const int nope = c.qk_nope, rope = c.qk_rope, vd = c.v_head, lat = c.kv_lora;
  const int nh = c.n_heads, qd = nope + rope, row = c.mla_row(L);
  std::vector<float> olat(static_cast<size_t>(nh) * lat);
  const int n = pos + 1;
  // The cache's rows [n][mla_row] as an F32 matrix: a position's score is
  // its row times the query's [latent | rotated | zeros for DSA's key]
  // parts, one product (SIMD, a row's sum in one order on every thread and
  // chunk).
  kernels::MatrixView keys;
  keys.fmt = format::Fmt::kF32;
  keys.rows = n;
  keys.cols = row;
  keys.payload = reinterpret_cast<const uint8_t*>(s.cache[L].data());
  ctx.pool.ParallelFor(nh, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> qlat(row), score(n);  // qlat: [kv_lora] latent query, [rope], zeros
    for (int64_t hd = h0; hd < h1; ++hd) {
      float* qh = q + hd * qd;
      ctx.rotary.Apply(qh + nope, pos);
      // The query in latent space: q_nope through the key rows of kv_b_proj.
      kernels::WeightedRows(*l.kv_b, hd * (nope + vd), qh, nope, qlat.data(), ctx.opt.isa);
      std::copy(qh + nope, qh + qd, qlat.begin() + lat);
      kernels::MatVec(keys, qlat.data(), score.data(), 0, n, ctx.opt.isa, ctx.opt.q4_input);
      float mx = -INFINITY;
      for (int t = 0; t < n; ++t) {
        // A position DSA left out weighs exactly 0, as transformers' mask.
        score[t] = keep.empty() || keep[t] ? score[t] * ctx.softmax_scale : -INFINITY;
        mx = std::max(mx, score[t]);
      }
      float sum = 0.f;
      for (int t = 0; t < n; ++t) sum += score[t] = std::exp(score[t] - mx);
      for (int t = 0; t < n; ++t) score[t] /= sum;
      float* ol = olat.data() + hd * lat;
      kernels::WeightedRowSum(score.data(), s.cache[L].data(), n, row, lat, ol, ctx.opt.isa);
      // Values: the value rows of kv_b_proj applied to the attended latent.
      kernels::MatrixView vrows = *l.kv_b;
      const int64_t first = hd * (nope + vd) + nope;
      const int64_t row_bytes = kernels::MatrixRowBytes(*l.kv_b);
      vrows.rows = vd;
      vrows.payload = l.kv_b->payload + first * row_bytes;
      if (l.kv_b->scales) vrows.scales = l.kv_b->scales + first * ScalesPerRow(*l.kv_b);
      kernels::MatVec(vrows, ol, o + hd * vd, 0, vd, ctx.opt.isa, ctx.opt.q4_input);
      if (l.g)
        for (int j = 0; j < vd; ++j) o[hd * vd + j] *= Sigmoid(gate[hd * vd + j]);
    }
  });
}

std::unique_ptr<AttentionLayer> MakeMla(const LayerBuild& b) {
  const std::string a = b.prefix + "self_attn.";
  std::optional<DsaIndexer> indexer;
  if (b.c.has_indexer(b.layer)) indexer.emplace(b.t, a);
  return std::make_unique<MlaLayer>(b.layer, ResolveMla(b.t, b.c, a), std::move(indexer));
}

}  // namespace waste
