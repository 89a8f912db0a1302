#include "engine/model/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <new>
#include <numbers>
#include <tuple>

#include "engine/format/encoding.h"
#include "engine/kernels/recurrence.h"
#include "engine/kernels/vq.h"
#include "engine/model/activations.h"
#include "engine/model/layer.h"
#include "engine/model/router.h"

namespace waste {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// y = x / rms(x) * w, over n values.
void RmsNorm(const float* x, const float* w, int n, float eps, float* y) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = 1.f / std::sqrt(static_cast<float>(ss / n) + eps);
  for (int i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

// x / sqrt(sum x^2 + 1e-6), as fla's l2norm (not F.normalize's max(|x|, eps)).
void L2Normalize(float* x, int n) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = 1.f / std::sqrt(static_cast<float>(ss) + 1e-6f);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

// The latent projections' norms are built without an eps in every reference
// (HF DeepseekV3, HF KimiLinear, Moonshot's code), so they take RMSNorm's
// default, whatever rms_norm_eps says.
constexpr float kLatentNormEps = 1e-6f;

// f16 scales per row of a trunk matrix (none for F32 and F16).
int64_t ScalesPerRow(const kernels::MatrixView& w) {
  return w.group > 0 ? (w.cols + w.group - 1) / w.group : 0;
}

// What Model::Load refuses whatever the trunk.
Status CheckLoad(const Container& ct, ExpertSource* experts, const ModelOptions& opt) {
  const ModelConfig& c = ct.config();
  if (c.tie_embeddings) return Status::Error("tie_word_embeddings is not implemented");
  if (opt.chunk < 1) return Status::Error("chunk must be at least 1");
  if (opt.lookahead < 0) return Status::Error("lookahead must be at least 0");
  if (c.n_moe_layers() > 0 && !experts) return Status::Error("a MoE model needs an expert source");
  return Status::Ok();
}

}  // namespace


Model::Model(const Container& ct, ExpertSource* experts, const ModelOptions& opt)
    : ct_(ct),
      c_(ct.config()),
      experts_(experts),
      opt_(opt),
      pool_(opt.threads > 0 ? opt.threads : kernels::DefaultThreads()),
      guess_config_(c_) {
  // The lookahead ranks experts as Route does, for more of them than top_k;
  // with grouped top-k only the experts of the kept groups can be chosen.
  int eligible = c_.n_experts;
  if (c_.n_group > 1 && c_.topk_group < c_.n_group)
    eligible = c_.topk_group * (c_.n_experts / c_.n_group);
  guess_config_.top_k = std::min({opt.lookahead, eligible, 64});  // Routing holds 64
  guess_.resize(c_.n_layers);
}

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::Load(const Container& ct, ExpertSource* experts,
                                           const ModelOptions& opt) {
  // Refuse what is cheap to refuse before reading the trunk.
  WASTE_RETURN_IF_ERROR(CheckLoad(ct, experts, opt));
  auto trunk = Trunk::Load(ct);
  if (!trunk.ok()) return trunk.status();
  return Load(ct, experts, opt, std::move(*trunk));
}

Result<std::unique_ptr<Model>> Model::Load(const Container& ct, ExpertSource* experts,
                                           const ModelOptions& opt, std::unique_ptr<Trunk> trunk) {
  WASTE_RETURN_IF_ERROR(CheckLoad(ct, experts, opt));
  if (!trunk) return Status::Error("no trunk");
  if (&trunk->container() != &ct)
    return Status::Error("the trunk was built over another container than the model's");
  std::unique_ptr<Model> m(new Model(ct, experts, opt));
  m->trunk_ = std::move(trunk);
  WASTE_RETURN_IF_ERROR(m->Resolve());
  return m;
}

Status Model::Resolve() {
  const Trunk& t = *trunk_;
  for (int L = 0; L < c_.n_layers; ++L) {
    auto l = std::make_unique<Layer>();
    const std::string p = "model.layers." + std::to_string(L) + ".";
    const std::string a = p + "self_attn.";
    l->kind = c_.layer_kind[L];
    l->in_norm = t.Vector(p + "input_layernorm.weight");
    l->post_norm = t.Vector(p + "post_attention_layernorm.weight");
    l->o = &t.Matrix(a + "o_proj.weight");
    if (l->kind == LayerKind::kKda) {
      l->q = &t.Matrix(a + "q_proj.weight");
      l->k = &t.Matrix(a + "k_proj.weight");
      l->v = &t.Matrix(a + "v_proj.weight");
      l->b = &t.Matrix(a + "b_proj.weight");
      l->f_a = &t.Matrix(a + "f_a_proj.weight");
      l->f_b = &t.Matrix(a + "f_b_proj.weight");
      l->g_a = &t.Matrix(a + "g_a_proj.weight");
      l->g_b = &t.Matrix(a + "g_b_proj.weight");
      l->conv[0] = t.Vector(a + "q_conv1d.weight");
      l->conv[1] = t.Vector(a + "k_conv1d.weight");
      l->conv[2] = t.Vector(a + "v_conv1d.weight");
      l->a_log = t.Vector(a + "A_log");
      l->dt_bias = t.Vector(a + "dt_bias");
      l->o_norm = t.Vector(a + "o_norm.weight");
    } else {
      if (c_.q_lora > 0) {
        l->q_a = &t.Matrix(a + "q_a_proj.weight");
        l->q_a_norm = t.Vector(a + "q_a_layernorm.weight");
        l->q_b = &t.Matrix(a + "q_b_proj.weight");
      } else {
        l->q_proj = &t.Matrix(a + "q_proj.weight");
      }
      l->kv_a = &t.Matrix(a + "kv_a_proj_with_mqa.weight");
      l->kv_a_norm = t.Vector(a + "kv_a_layernorm.weight");
      // Its key rows are also used transposed (absorbed into the query), read
      // in place by kernels::WeightedRows.
      l->kv_b = &t.Matrix(a + "kv_b_proj.weight");
    }
    if (c_.is_moe_layer(L)) {
      const std::string m = p + "block_sparse_moe.";
      l->moe = true;
      l->router = &t.Matrix(m + "gate.weight");
      l->router_bias = t.Vector(m + "gate.e_score_correction_bias");
      if (c_.n_shared > 0) {
        l->gate = &t.Matrix(m + "shared_experts.gate_proj.weight");
        l->up = &t.Matrix(m + "shared_experts.up_proj.weight");
        l->down = &t.Matrix(m + "shared_experts.down_proj.weight");
      }
    } else {
      l->gate = &t.Matrix(p + "mlp.gate_proj.weight");
      l->up = &t.Matrix(p + "mlp.up_proj.weight");
      l->down = &t.Matrix(p + "mlp.down_proj.weight");
    }
    layers_.push_back(std::move(l));
  }
  lm_head_ = &t.Matrix("lm_head.weight");
  final_norm_ = t.Vector("model.norm.weight");

  // Rotary (DeepSeek-V3: YaRN on the rope dims); Kimi-Linear's MLA has none.
  const double pi = std::numbers::pi;
  const int dim = c_.qk_rope;
  softmax_scale_ = 1.f / std::sqrt(static_cast<float>(c_.qk_nope + c_.qk_rope));
  if (!c_.mla_nope && dim > 0) {
    // As HF computes it, in float32: pos_freqs = theta^(2i/d); YaRN blends
    // 1/pos_freqs (extrapolation) and 1/(factor * pos_freqs) by a ramp.
    const float base = static_cast<float>(c_.rope_theta);
    inv_freq_.resize(dim / 2);
    std::vector<float> pos_freqs(dim / 2);
    for (int j = 0; j < dim / 2; ++j) {
      pos_freqs[j] = std::pow(base, static_cast<float>(2 * j) / static_cast<float>(dim));
      inv_freq_[j] = 1.f / pos_freqs[j];
    }
    const YarnConfig& y = c_.yarn;
    if (y.factor > 1.0) {
      auto corr = [&](double rot) {
        return dim * std::log(y.original_max_position / (rot * 2 * pi)) /
               (2 * std::log(c_.rope_theta));
      };
      double low = std::max(std::floor(corr(y.beta_fast)), 0.0);
      double high = std::min(std::ceil(corr(y.beta_slow)), static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      const float factor = static_cast<float>(y.factor);
      for (int j = 0; j < dim / 2; ++j) {
        const float ramp = std::clamp(static_cast<float>((j - low) / (high - low)), 0.f, 1.f);
        const float extrapolation = 1.f - ramp;
        inv_freq_[j] = 1.f / (factor * pos_freqs[j]) * (1.f - extrapolation) +
                       1.f / pos_freqs[j] * extrapolation;
      }
      if (y.mscale_all_dim > 0) {
        const double ms = 0.1 * y.mscale_all_dim * std::log(y.factor) + 1.0;
        softmax_scale_ *= static_cast<float>(ms * ms);
      }
    }
  }
  return Status::Ok();
}

uint64_t Session::state_bytes() const {
  uint64_t n = 0;
  for (const auto& v : kda_state) n += v.size() * 4;
  for (const auto& v : conv_ring) n += v.size() * 4;
  for (const auto& v : latent_kv) n += v.size() * 4;
  return n;
}

Session Model::NewSession(int max_context) const {
  Session s;
  s.max_context = max_context;
  const size_t kda = static_cast<size_t>(c_.kda_heads) * c_.kda_head_dim * c_.kda_head_dim;
  const size_t ring = static_cast<size_t>(3) * (c_.conv_kernel - 1) * c_.kda_width();
  const size_t kv = static_cast<size_t>(max_context) * (c_.kv_lora + c_.qk_rope);
  // Each layer's part starts on a 64-byte line.
  auto line = [](size_t floats) { return (floats + 15) / 16 * 16; };
  size_t total = 0;
  for (int L = 0; L < c_.n_layers; ++L)
    total += c_.layer_kind[L] == LayerKind::kKda ? line(kda) + line(ring) : line(kv);
  auto memory = Region::Allocate(std::max<size_t>(total, 1) * sizeof(float), /*populate=*/false);
  if (!memory.ok()) throw std::bad_alloc();
  s.memory = std::move(*memory);
  float* next = reinterpret_cast<float*>(s.memory.data());
  auto take = [&](size_t floats) {
    std::span<float> part(next, floats);
    next += line(floats);
    return part;
  };
  s.kda_state.resize(c_.n_layers);
  s.conv_ring.resize(c_.n_layers);
  s.latent_kv.resize(c_.n_layers);
  for (int L = 0; L < c_.n_layers; ++L) {
    if (c_.layer_kind[L] == LayerKind::kKda) {
      s.kda_state[L] = take(kda);
      s.conv_ring[L] = take(ring);
    } else {
      s.latent_kv[L] = take(kv);
    }
  }
  return s;
}

void Model::MatVec(const kernels::MatrixView& w, const float* x, float* y) {
  MatVecs({{&w, x, y}});
}

void Model::MatVecs(std::initializer_list<kernels::MatVecJob> jobs) {
  kernels::MatVecs(pool_, {jobs.begin(), jobs.size()}, 32, opt_.isa);
}

void Model::RotaryInPlace(float* v, int pos) const {
  // Pairs (2i, 2i+1) rotate by pos * inv_freq[i] (HF DeepseekV3's
  // rope_interleave: its de-interleave then rotate_half is this rotation
  // with the output dims reordered, which no dot product can tell apart).
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float angle = static_cast<float>(pos) * inv_freq_[i];
    const float c = std::cos(angle), s = std::sin(angle);
    const float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c - x1 * s;
    v[2 * i + 1] = x1 * c + x0 * s;
  }
}

void Model::Kda(int L, Session& s, const float* h, float* out) {
  const Layer& l = *layers_[L];
  const int H = c_.kda_heads, D = c_.kda_head_dim, C = H * D, K = c_.conv_kernel;
  std::vector<float> qkv(3 * static_cast<size_t>(C)), f(D), fg(C), ga(D), gate(C), beta(H), o(C);
  // Three barriers per layer: every projection of h in one pass; then each
  // head's low-rank second halves, convolutions and recurrence in one pass
  // over the heads (a head's rows of f_b and g_b and its conv channels are
  // its own); then o. Each row and channel is computed as before, wholly
  // by one thread, so the bits are those of one pass per matrix.
  MatVecs({{l.q, h, qkv.data()},
           {l.k, h, qkv.data() + C},
           {l.v, h, qkv.data() + 2 * C},
           {l.f_a, h, f.data()},
           {l.b, h, beta.data()},
           {l.g_a, h, ga.data()}});
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  float* S = s.kda_state[L].data();
  float* ring = s.conv_ring[L].data();
  pool_.ParallelFor(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> u(D), decay(D), normed(D);
    for (int64_t hd = h0; hd < h1; ++hd) {
      kernels::MatVec(*l.f_b, f.data(), fg.data(), hd * D, (hd + 1) * D, opt_.isa);
      kernels::MatVec(*l.g_b, ga.data(), gate.data(), hd * D, (hd + 1) * D, opt_.isa);
      // Short causal convolutions of the head's channels, then SiLU. The
      // ring holds the K-1 previous projections, oldest first; tap K-1
      // multiplies the current one.
      for (int p = 0; p < 3; ++p) {
        float* r = ring + static_cast<size_t>(p) * (K - 1) * C;
        float* x = qkv.data() + static_cast<size_t>(p) * C;
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
      float* q = qkv.data() + hd * D;
      float* k = qkv.data() + C + hd * D;
      const float* v = qkv.data() + 2 * C + hd * D;
      L2Normalize(q, D);
      L2Normalize(k, D);
      for (int i = 0; i < D; ++i) q[i] *= scale;
      const float a = std::exp(l.a_log[hd]);
      for (int i = 0; i < D; ++i)
        decay[i] = std::exp(-a * Softplus(fg[hd * D + i] + l.dt_bias[hd * D + i]));
      const float b = Sigmoid(beta[hd]);
      float* oh = o.data() + hd * D;
      kernels::KdaStateStep(S + hd * D * D, D, decay.data(), k, v, b, q, u.data(), oh, opt_.isa);
      // Gated output norm, per head.
      RmsNorm(oh, l.o_norm, D, c_.rms_eps, normed.data());
      for (int j = 0; j < D; ++j) oh[j] = normed[j] * Sigmoid(gate[hd * D + j]);
    }
  });
  MatVec(*l.o, o.data(), out);
}

void Model::Mla(int L, Session& s, int pos, const float* h, float* out) {
  const Layer& l = *layers_[L];
  const int nh = c_.n_heads, nope = c_.qk_nope, rope = c_.qk_rope, vd = c_.v_head, lat = c_.kv_lora;
  const int qd = nope + rope, row = lat + rope;
  std::vector<float> q(static_cast<size_t>(nh) * qd), ckv(row);
  // The query's first projection and kv_a read the same h: one pass.
  if (l.q_a) {
    std::vector<float> qa(c_.q_lora), qn(c_.q_lora);
    MatVecs({{l.q_a, h, qa.data()}, {l.kv_a, h, ckv.data()}});
    RmsNorm(qa.data(), l.q_a_norm, c_.q_lora, kLatentNormEps, qn.data());
    MatVec(*l.q_b, qn.data(), q.data());
  } else {
    MatVecs({{l.q_proj, h, q.data()}, {l.kv_a, h, ckv.data()}});
  }
  float* cache = s.latent_kv[L].data() + static_cast<size_t>(pos) * row;
  RmsNorm(ckv.data(), l.kv_a_norm, lat, kLatentNormEps, cache);
  std::copy(ckv.begin() + lat, ckv.end(), cache + lat);
  if (!inv_freq_.empty()) RotaryInPlace(cache + lat, pos);

  std::vector<float> olat(static_cast<size_t>(nh) * lat), o(static_cast<size_t>(nh) * vd);
  const int n = pos + 1;
  pool_.ParallelFor(nh, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> qlat(lat), score(n);
    for (int64_t hd = h0; hd < h1; ++hd) {
      float* qh = q.data() + hd * qd;
      if (!inv_freq_.empty()) RotaryInPlace(qh + nope, pos);
      // The query in latent space: q_nope through the key rows of kv_b_proj.
      kernels::WeightedRows(*l.kv_b, hd * (nope + vd), qh, nope, qlat.data(), opt_.isa);
      float mx = -INFINITY;
      for (int t = 0; t < n; ++t) {
        const float* kv = s.latent_kv[L].data() + static_cast<size_t>(t) * row;
        float acc = 0.f;
        for (int c = 0; c < lat; ++c) acc += qlat[c] * kv[c];
        for (int r = 0; r < rope; ++r) acc += qh[nope + r] * kv[lat + r];
        score[t] = acc * softmax_scale_;
        mx = std::max(mx, score[t]);
      }
      float sum = 0.f;
      for (int t = 0; t < n; ++t) sum += score[t] = std::exp(score[t] - mx);
      for (int t = 0; t < n; ++t) score[t] /= sum;
      float* ol = olat.data() + hd * lat;
      kernels::WeightedRowSum(score.data(), s.latent_kv[L].data(), n, row, lat, ol, opt_.isa);
      // Values: the value rows of kv_b_proj applied to the attended latent.
      kernels::MatrixView vrows = *l.kv_b;
      const int64_t first = hd * (nope + vd) + nope;
      const int64_t row_bytes = kernels::MatrixRowBytes(*l.kv_b);
      vrows.rows = vd;
      vrows.payload = l.kv_b->payload + first * row_bytes;
      if (l.kv_b->scales) vrows.scales = l.kv_b->scales + first * ScalesPerRow(*l.kv_b);
      kernels::MatVec(vrows, ol, o.data() + hd * vd, 0, vd, opt_.isa);
    }
  });
  MatVec(*l.o, o.data(), out);
}

void Model::DenseMlp(int L, const float* h, float* out) {
  const Layer& l = *layers_[L];
  const int64_t inter = l.gate->rows;
  std::vector<float> g(inter), u(inter);
  MatVecs({{l.gate, h, g.data()}, {l.up, h, u.data()}});
  for (int64_t i = 0; i < inter; ++i) g[i] = Silu(g[i]) * u[i];
  MatVec(*l.down, g.data(), out);
}

std::vector<int> Model::GuessExperts(int L, int T, const float* h, size_t cap) {
  const Layer& l = *layers_[L];
  const int E = c_.n_experts, hid = c_.hidden;
  // Own buffers: nothing the real path computes is touched.
  std::vector<float> logits(E);               // [n_experts]: one token's router logits
  std::vector<int> votes(E, 0), ranks(E, 0);  // [n_experts]: tokens naming it, sum of its ranks
  Routing r;
  for (int t = 0; t < T; ++t) {
    MatVec(*l.router, h + static_cast<size_t>(t) * hid, logits.data());
    Route(guess_config_, logits, {l.router_bias, static_cast<size_t>(E)}, &r);
    for (int j = 0; j < r.count; ++j) {
      ++votes[r.expert[j]];
      ranks[r.expert[j]] += j;
    }
  }
  std::vector<int> named;
  for (int e = 0; e < E; ++e)
    if (votes[e] > 0) named.push_back(e);
  // Most voted first, then best ranked: what a capped hint keeps.
  std::sort(named.begin(), named.end(), [&](int a, int b) {
    return std::tuple(-votes[a], ranks[a], a) < std::tuple(-votes[b], ranks[b], b);
  });
  if (named.size() > cap) named.resize(cap);
  return named;
}

void Model::HintGuess(int L) {
  if (guess_[L].empty()) return;
  experts_->Hint(L, guess_[L], HintKind::kLookahead);
  lookahead_stats_.hinted += guess_[L].size();
}

void Model::ScoreGuesses(int L, std::span<const int> wanted) {
  auto score = [&](std::vector<int>& guess, LookaheadStats& st) {
    if (guess.empty()) return;
    for (int e : guess) st.used += std::binary_search(wanted.begin(), wanted.end(), e);
    st.demanded += wanted.size();
    guess.clear();
  };
  score(guess_[L], lookahead_stats_);
  if (L == c_.first_dense) score(next_token_guess_, next_token_stats_);
}

Status Model::ForwardChunk(Session& s, std::span<const int> tokens, float* logits_out, bool all) {
  const int T = static_cast<int>(tokens.size()), hid = c_.hidden;
  if (s.position + T > s.max_context && c_.n_kda_layers() < c_.n_layers)
    return Status::Error("context is full (" + std::to_string(s.max_context) + " tokens)");
  std::vector<float> x(static_cast<size_t>(T) * hid), hn(static_cast<size_t>(T) * hid),
      y(static_cast<size_t>(T) * hid);
  // The lookahead's own input, so that nothing the real path reads is
  // written: [T][hidden], allocated only when the lookahead is on.
  std::vector<float> guess_in(guess_config_.top_k > 0 ? static_cast<size_t>(T) * hid : 0);
  // Lookahead records hinted per layer and chunk: a long chunk's guesses
  // must not flood a small cache, so no more than the demand window.
  const size_t cap = static_cast<size_t>(std::max(1, opt_.prefetch));
  for (int t = 0; t < T; ++t)
    WASTE_RETURN_IF_ERROR(trunk_->EmbeddingRow(tokens[t], x.data() + static_cast<size_t>(t) * hid));
  for (int L = 0; L < c_.n_layers; ++L) {
    const Layer& l = *layers_[L];
    const auto ta = Clock::now();
    const uint64_t ja = pool_.jobs();
    for (int t = 0; t < T; ++t) {
      float* xt = x.data() + static_cast<size_t>(t) * hid;
      float* ht = hn.data() + static_cast<size_t>(t) * hid;
      float* yt = y.data() + static_cast<size_t>(t) * hid;
      RmsNorm(xt, l.in_norm, hid, c_.rms_eps, ht);
      if (l.kind == LayerKind::kKda)
        Kda(L, s, ht, yt);
      else
        Mla(L, s, s.position + t, ht, yt);
      for (int i = 0; i < hid; ++i) xt[i] += yt[i];
      RmsNorm(xt, l.post_norm, hid, c_.rms_eps, ht);
    }
    times_.attention += Since(ta);
    attention_jobs_ += pool_.jobs() - ja;
    // Lookahead: the next layer's router (when it has one) on the residual
    // as it stands, normed with that layer's own post-attention norm, as its
    // router will see it two residual updates later. On kl48b this guessed
    // 81.4% right at 8 per token, against 80.7% through this layer's norm
    // (the state this layer's FFN sees) and 75.2% unnormed (MEASUREMENTS.md).
    const int ahead =
        guess_config_.top_k > 0 && L + 1 < c_.n_layers && c_.is_moe_layer(L + 1) ? L + 1 : -1;
    if (ahead >= 0) {
      const auto tl = Clock::now();
      for (int t = 0; t < T; ++t)
        RmsNorm(x.data() + static_cast<size_t>(t) * hid, layers_[ahead]->post_norm, hid, c_.rms_eps,
                guess_in.data() + static_cast<size_t>(t) * hid);
      guess_[ahead] = GuessExperts(ahead, T, guess_in.data(), cap);
      times_.lookahead += Since(tl);
    }
    if (l.moe) {
      WASTE_RETURN_IF_ERROR(MoeChunk(L, s.position, T, hn.data(), y.data(), ahead));
    } else {
      if (ahead >= 0) HintGuess(ahead);
      const auto to = Clock::now();
      for (int t = 0; t < T; ++t)
        DenseMlp(L, hn.data() + static_cast<size_t>(t) * hid,
                 y.data() + static_cast<size_t>(t) * hid);
      times_.other += Since(to);
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  if (opt_.lookahead_next_token && guess_config_.top_k > 0 && c_.n_moe_layers() > 0) {
    // The next token's first MoE layer, from this chunk's last final state.
    const auto tl = Clock::now();
    const int first = c_.first_dense;
    std::vector<float> v(hid);  // [hidden]
    RmsNorm(x.data() + static_cast<size_t>(T - 1) * hid, layers_[first]->post_norm, hid, c_.rms_eps,
            v.data());
    next_token_guess_ = GuessExperts(first, 1, v.data(), cap);
    times_.lookahead += Since(tl);
    if (!next_token_guess_.empty()) {
      experts_->Hint(first, next_token_guess_, HintKind::kLookahead);
      next_token_stats_.hinted += next_token_guess_.size();
    }
  }
  const auto th = Clock::now();
  for (int t = all ? 0 : T - 1; t < T; ++t) {
    RmsNorm(x.data() + static_cast<size_t>(t) * hid, final_norm_, hid, c_.rms_eps, hn.data());
    MatVec(*lm_head_, hn.data(), logits_out + (all ? static_cast<size_t>(t) * c_.vocab : 0));
  }
  times_.other += Since(th);
  s.position += T;
  return Status::Ok();
}

Status Model::Forward(Session& s, std::span<const int> tokens, float* logits,
                      std::vector<float>* all_logits) {
  if (tokens.empty()) return Status::Error("no tokens to run");
  for (int id : tokens)
    if (id < 0 || id >= c_.vocab)
      return Status::Error("token id " + std::to_string(id) + " is outside the vocabulary of " +
                           std::to_string(c_.vocab));
  if (all_logits) all_logits->assign(tokens.size() * static_cast<size_t>(c_.vocab), 0.f);
  std::vector<float> last(c_.vocab);
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(opt_.chunk)) {
    const auto part = tokens.subspan(at, std::min<size_t>(opt_.chunk, tokens.size() - at));
    float* dst = all_logits ? all_logits->data() + at * static_cast<size_t>(c_.vocab) : last.data();
    WASTE_RETURN_IF_ERROR(ForwardChunk(s, part, dst, all_logits != nullptr));
    experts_->TokensDone(static_cast<int>(part.size()));
  }
  if (logits) {
    const float* src =
        all_logits ? all_logits->data() + (tokens.size() - 1) * static_cast<size_t>(c_.vocab)
                   : last.data();
    std::copy(src, src + c_.vocab, logits);
  }
  return Status::Ok();
}

}  // namespace waste
