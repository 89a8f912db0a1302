#include "engine/synth/synth.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>

#include "engine/format/container.h"  // JsonInt, JsonNumber, JsonString
#include "engine/format/encoding.h"
#include "engine/format/writer.h"
#include "engine/model/router.h"
#include "engine/synth/tokenizer_files.h"

namespace waste {
namespace {

using format::Fmt;
using nlohmann::json;

// xoshiro256** seeded through splitmix64: fast, and the same stream on every machine.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& s : s_) s = SplitMix(seed);
  }
  uint64_t Next() {
    const uint64_t r = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0], s_[3] ^= s_[1], s_[1] ^= s_[2], s_[0] ^= s_[3], s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return r;
  }
  float Uniform(float lo, float hi) {  // [lo, hi)
    return lo + (hi - lo) * static_cast<float>(Next() >> 40) * (1.f / 16777216.f);
  }
  float Normal() {  // Irwin-Hall: plenty for weights, and exactly reproducible
    float s = 0.f;
    for (int i = 0; i < 12; ++i) s += Uniform(0.f, 1.f);
    return s - 6.f;
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t s_[4];
};

uint64_t Mix(uint64_t seed, std::string_view what, uint64_t a = 0, uint64_t b = 0) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (char ch : what) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  h = (h ^ a) * 1099511628211ull;
  h = (h ^ b) * 1099511628211ull;
  return h;
}

// The values of one trunk tensor: matrices keep the variance of their input
// (uniform in +-sqrt(3 / fan_in)), output projections at half that so the
// residual stream grows slowly, norms near 1. Each row is drawn from its own
// stream, so rows can be filled on any thread in any order.
class TensorValues {
 public:
  // `bias_scale` and `anchors` shape the router's correction bias: skew *
  // N(0, 1) per expert, plus kAnchorBoost on `anchors` experts of the layer.
  // `zero_centered`: the config's RMSNorms scale by 1 + w (all but Gated
  // DeltaNet's gated norm), so theirs are drawn near 0.
  TensorValues(const TensorSpec& s, uint64_t seed, float bias_scale = 1.f, int anchors = 0,
               bool zero_centered = false)
      : seed_(Mix(seed, s.name)), cols_(s.shape.back()), anchors_(anchors) {
    auto ends = [&](std::string_view suffix) {
      return s.name.size() >= suffix.size() &&
             s.name.compare(s.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends("norm.weight") && zero_centered && !ends("linear_attn.norm.weight"))
      lo_ = -0.1f, hi_ = 0.1f;
    else if (ends("norm.weight"))
      lo_ = 0.9f, hi_ = 1.1f;
    else if (ends("conv1d.weight"))
      lo_ = -0.5f, hi_ = 0.5f;
    else if (ends("A_log"))
      kind_ = Kind::kLogUniform, lo_ = 1.f, hi_ = 16.f;
    else if (ends("dt_bias"))
      lo_ = -1.f, hi_ = 1.f;
    else if (ends("e_score_correction_bias"))
      kind_ = Kind::kNormal, scale_ = bias_scale;
    else if (ends("embed_tokens.weight"))
      lo_ = -1.f, hi_ = 1.f;
    else {
      // K3's latent projections: into the latent at full gain, out of it
      // (the output projection) at half.
      const bool out = (ends("o_proj.weight") || ends("down_proj.weight") ||
                        ends("routed_expert_up_proj.weight")) &&
                       !ends("routed_expert_down_proj.weight");
      const float gain = out ? 0.5f : 1.f;
      hi_ = gain * std::sqrt(3.f / static_cast<float>(cols_));
      lo_ = -hi_;
    }
  }
  void FillRows(int64_t first_row, int64_t rows, float* out) const {
    for (int64_t r = 0; r < rows; ++r) {
      Rng rng(seed_ ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(first_row + r + 1)));
      float* o = out + r * cols_;
      for (int64_t i = 0; i < cols_; ++i) {
        switch (kind_) {
          case Kind::kUniform:
            o[i] = rng.Uniform(lo_, hi_);
            break;
          case Kind::kLogUniform:
            o[i] = std::log(rng.Uniform(lo_, hi_));
            break;
          case Kind::kNormal:
            o[i] = scale_ * rng.Normal();
            break;
        }
      }
      if (kind_ == Kind::kNormal) {  // anchor experts: chosen by nearly every token
        Rng pick(seed_ ^ 0xa5a5a5a5a5a5a5a5ull);
        for (int a = 0; a < anchors_ && a < cols_; ++a) {
          int64_t e;
          do e = static_cast<int64_t>(pick.Next() % static_cast<uint64_t>(cols_));
          while (o[e] >= kAnchorBoost / 2);
          o[e] += kAnchorBoost;
        }
      }
    }
  }
  std::vector<float> All(int64_t elements) const {
    std::vector<float> v(static_cast<size_t>(elements));
    FillRows(0, elements / cols_, v.data());
    return v;
  }

 private:
  enum class Kind { kUniform, kLogUniform, kNormal };
  // Sigmoid scores lie in (0, 1): a boost of 1 outranks any of them.
  static constexpr float kAnchorBoost = 1.f;
  uint64_t seed_;
  int64_t cols_;
  int anchors_ = 0;
  Kind kind_ = Kind::kUniform;
  float lo_ = 0.f, hi_ = 0.f, scale_ = 1.f;
};

int64_t Elements(const TensorSpec& s) {
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  return n;
}

// The skew that puts `target` of the routing on the busiest 10% of experts,
// found on the router logits of random unit-variance hidden states.
struct RoutingEstimate {
  double skew, hot_share, overlap;
};

RoutingEstimate EstimateRouting(const ModelConfig& c, const std::vector<float>& router,
                                const std::function<std::vector<float>(double)>& bias_for_skew,
                                double skew_or_negative, double target, uint64_t seed) {
  const int tokens = 512, n = c.n_experts;
  std::vector<float> logits(static_cast<size_t>(tokens) * n);
  Rng rng(Mix(seed, "routing-estimate"));
  std::vector<float> h(c.hidden);
  for (int t = 0; t < tokens; ++t) {
    for (float& x : h) x = rng.Normal();
    for (int e = 0; e < n; ++e) {
      double acc = 0;
      for (int i = 0; i < c.hidden; ++i)
        acc += router[static_cast<size_t>(e) * c.hidden + i] * h[i];
      logits[static_cast<size_t>(t) * n + e] = static_cast<float>(acc);
    }
  }
  auto measure = [&](double skew) {
    const std::vector<float> bias = bias_for_skew(skew);
    std::vector<double> count(n, 0.0);
    for (int t = 0; t < tokens; ++t) {
      Routing r;
      Route(c, {logits.data() + static_cast<size_t>(t) * n, static_cast<size_t>(n)}, bias, &r);
      for (int i = 0; i < r.count; ++i) count[r.expert[i]] += 1;
    }
    std::vector<double> sorted = count;
    std::sort(sorted.rbegin(), sorted.rend());
    const int hot = std::max(1, n / 10);
    double top = 0, all = 0, sq = 0;
    for (int e = 0; e < n; ++e) {
      all += sorted[e];
      if (e < hot) top += sorted[e];
      const double p = count[e] / tokens;
      sq += p * p;
    }
    return std::pair<double, double>(top / all, sq / c.top_k);
  };
  double skew = skew_or_negative;
  if (skew < 0) {  // bisect: the share grows with the skew
    double lo = 0, hi = 4;
    for (int i = 0; i < 20; ++i) {
      const double mid = 0.5 * (lo + hi);
      (measure(mid).first < target ? lo : hi) = mid;
    }
    skew = 0.5 * (lo + hi);
  }
  const auto [share, overlap] = measure(skew);
  return {skew, share, overlap};
}

// Fills one expert record's payload: random indices, row scales that keep
// the matrix's output at the variance of its input.
void FillExpert(const RecordLayout& lay, const ExpertQuant& q, uint64_t seed, int layer, int expert,
                std::span<uint8_t> rec) {
  Rng rng(Mix(seed, "expert", static_cast<uint64_t>(layer), static_cast<uint64_t>(expert)));
  if (q.fmt == Fmt::kMXFP4) {
    // Random E2M1 codes (their values' rms is about 2.93) and block scales
    // of 2^e near sqrt(1 / fan_in) / 2.93, so the matrix keeps its input's
    // variance; the biases stay zero.
    uint8_t* scales = rec.data() + lay.scales_off;
    for (int m = 0; m < format::kMatrices; ++m) {
      uint8_t* codes = rec.data() + lay.matrix_off[m];
      const int64_t n = lay.rows[m] * lay.cols[m] / 2;
      for (int64_t i = 0; i < n; i += 8) {
        const uint64_t r = rng.Next();
        std::memcpy(codes + i, &r, static_cast<size_t>(std::min<int64_t>(8, n - i)));
      }
      const float gain = m == 2 ? 0.5f : 1.f;
      const int e = 127 + static_cast<int>(std::lround(std::log2(
                              gain / (2.93f * std::sqrt(static_cast<float>(lay.cols[m]))))));
      const int64_t blocks = lay.rows[m] * (lay.cols[m] / format::kMxfp4Block);
      for (int64_t b = 0; b < blocks; ++b)
        scales[b] = static_cast<uint8_t>(e - static_cast<int>(rng.Next() & 1));
      scales += blocks;
    }
    return;
  }
  if (q.fmt == Fmt::kQ4GR || q.fmt == Fmt::kINT4) {
    // Nibbles uniform in 1..15, the values -7..7 (mean zero: a mean would be
    // a component every expert shares, and it concentrates the routing; rms
    // about 4.32), and group scales (Q4GR's f16, INT4's bf16) near
    // sqrt(1 / fan_in) / 4.32, so the matrix keeps its input's variance.
    uint8_t* sc = rec.data() + lay.scales_off;
    for (int m = 0; m < format::kMatrices; ++m) {
      uint8_t* codes = rec.data() + lay.matrix_off[m];
      const int64_t n = lay.rows[m] * lay.cols[m] / 2;
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t r = rng.Next();
        const auto nibble = [](uint32_t x) {
          return static_cast<uint8_t>(1 + ((uint64_t{x} * 15) >> 32));
        };
        codes[i] = static_cast<uint8_t>(nibble(static_cast<uint32_t>(r)) |
                                        nibble(static_cast<uint32_t>(r >> 32)) << 4);
      }
      const float gain = m == 2 ? 0.5f : 1.f;
      const float a = gain / (4.32f * std::sqrt(static_cast<float>(lay.cols[m])));
      const int64_t groups = lay.rows[m] * (lay.cols[m] / q.vec_dim);
      for (int64_t g = 0; g < groups; ++g, sc += 2) {
        const float s = a * rng.Uniform(0.8f, 1.2f);
        const uint16_t h = q.fmt == Fmt::kINT4 ? format::F32ToBf16(s) : format::F32ToF16(s);
        std::memcpy(sc, &h, 2);
      }
    }
    return;
  }
  const int bpv = q.bytes_per_vector();
  const bool mask = q.index_bits == 8 && q.entries < 256;
  for (int m = 0; m < format::kMatrices; ++m) {
    const int64_t rows = lay.rows[m], nvec = lay.cols[m] / q.vec_dim;
    const int64_t block = q.index_block ? q.index_block : rows;
    uint8_t* base = rec.data() + lay.matrix_off[m];
    for (int64_t b0 = 0; b0 < rows; b0 += block) {
      const int64_t valid = std::min(block, rows - b0);  // padding rows stay zero
      for (int64_t v = 0; v < nvec; ++v) {
        uint8_t* p = base + ((b0 / block) * nvec + v) * block * bpv;
        const int64_t n = valid * bpv;
        for (int64_t i = 0; i < n; i += 8) {  // eight index bytes per draw
          const uint64_t r = rng.Next();
          std::memcpy(p + i, &r, static_cast<size_t>(std::min<int64_t>(8, n - i)));
        }
        if (mask)
          for (int64_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(p[i] % q.entries);
      }
    }
  }
  // Codebook entries are uniform in +-1 at stage 0, so a weight is about
  // U(-1, 1) * scale; the scale brings it to +-sqrt(3 / fan_in).
  uint8_t* sc = rec.data() + lay.scales_off;
  for (int m = 0; m < format::kMatrices; ++m) {
    const float gain = m == 2 ? 0.5f : 1.f;
    const float a = gain * std::sqrt(3.f / static_cast<float>(lay.cols[m]));
    for (int64_t r = 0; r < lay.rows[m]; ++r) {
      const uint16_t h = format::F32ToF16(a * rng.Uniform(0.8f, 1.2f));
      sc[0] = static_cast<uint8_t>(h);
      sc[1] = static_cast<uint8_t>(h >> 8);
      sc += 2;
    }
  }
}

std::vector<float> Codebooks(const ExpertQuant& q, uint64_t seed, int layer) {
  std::vector<float> books(static_cast<size_t>(3 * q.stages) * q.entries * q.vec_dim);
  Rng rng(Mix(seed, "codebooks", static_cast<uint64_t>(layer)));
  const size_t per = static_cast<size_t>(q.entries) * q.vec_dim;
  for (int b = 0; b < 3 * q.stages; ++b) {
    const float amp = std::pow(0.5f, static_cast<float>(b % q.stages));  // residual stages shrink
    for (size_t i = 0; i < per; ++i) books[b * per + i] = rng.Uniform(-amp, amp);
  }
  return books;
}

}  // namespace

json SynthSpec::ToJson() const {
  return {{"preset", name},
          {"config", config},
          {"expert_format", std::string(format::FmtName(expert_fmt))},
          {"trunk_bits", trunk_bits},
          {"head_bits", head_bits},
          {"seed", seed},
          {"route_skew", route_skew},
          {"hot_share", hot_share},
          {"anchor_experts", anchor_experts}};
}

Result<SynthSpec> SynthSpec::FromJson(const json& j) {
  if (!j.is_object() || !j.contains("config"))
    return Status::Error("synth config: expected an object with a \"config\" key");
  const std::string w = "synth config: ";
  SynthSpec s;
  s.name = "custom";
  WASTE_RETURN_IF_ERROR(JsonString(j, w, "preset", &s.name));
  s.config = j["config"];
  if (!s.config.is_object()) return Status::Error(w + "config is not an object");
  int64_t vocab = 0;  // checked here too, so that a file's error names the file
  WASTE_RETURN_IF_ERROR(JsonInt(s.config, w + "config.", "vocab_size", 0, 1 << 24, &vocab));
  std::string fmt = "VQ3R";
  WASTE_RETURN_IF_ERROR(JsonString(j, w, "expert_format", &fmt));
  if (fmt == "VQ3R" || fmt == "vq3r")
    s.expert_fmt = Fmt::kVQ3R;
  else if (fmt == "VQ2R" || fmt == "vq2r")
    s.expert_fmt = Fmt::kVQ2R;
  else if (fmt == "VQ4P" || fmt == "vq4p")
    s.expert_fmt = Fmt::kVQ4P;
  else if (fmt == "MXFP4" || fmt == "mxfp4")
    s.expert_fmt = Fmt::kMXFP4;
  else if (fmt == "Q4GR" || fmt == "q4gr")
    s.expert_fmt = Fmt::kQ4GR;
  else if (fmt == "INT4" || fmt == "int4")
    s.expert_fmt = Fmt::kINT4;
  else
    return Status::Error("synth config: expert_format \"" + fmt +
                         "\" (VQ3R, VQ2R, VQ4P, MXFP4, Q4GR, INT4)");
  // Type and a range the fields fit in here; what is sensible, below.
  int64_t trunk_bits = s.trunk_bits, head_bits = s.head_bits, seed = 1, anchors = s.anchor_experts;
  WASTE_RETURN_IF_ERROR(JsonInt(j, w, "trunk_bits", INT32_MIN, INT32_MAX, &trunk_bits));
  WASTE_RETURN_IF_ERROR(JsonInt(j, w, "head_bits", INT32_MIN, INT32_MAX, &head_bits));
  WASTE_RETURN_IF_ERROR(JsonInt(j, w, "seed", 0, INT64_MAX, &seed));
  WASTE_RETURN_IF_ERROR(JsonInt(j, w, "anchor_experts", INT32_MIN, INT32_MAX, &anchors));
  s.trunk_bits = static_cast<int>(trunk_bits);
  s.head_bits = static_cast<int>(head_bits);
  s.seed = static_cast<uint64_t>(seed);
  s.anchor_experts = static_cast<int>(anchors);
  constexpr double kFinite = std::numeric_limits<double>::max();
  WASTE_RETURN_IF_ERROR(JsonNumber(j, w, "route_skew", -kFinite, kFinite, &s.route_skew));
  WASTE_RETURN_IF_ERROR(JsonNumber(j, w, "hot_share", -kFinite, kFinite, &s.hot_share));
  if (s.trunk_bits != 4 && s.trunk_bits != 8)
    return Status::Error("synth config: trunk_bits must be 4 or 8");
  if (s.head_bits != 4 && s.head_bits != 8)
    return Status::Error("synth config: head_bits must be 4 or 8");
  if (s.anchor_experts < 0 || s.anchor_experts > 64)
    return Status::Error("synth config: anchor_experts must be in [0, 64]");
  if (!(s.hot_share > 0.1 && s.hot_share < 1.0))
    return Status::Error("synth config: hot_share must be in (0.1, 1)");
  return s;
}

Result<SynthReport> WriteSynthetic(const SynthSpec& spec, const std::string& out, bool overwrite,
                                   int jobs,
                                   const std::function<void(std::string_view)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  json config = spec.config;
  // The tokenizer decides the special-token ids; make the config agree.
  int64_t vocab = 0;
  WASTE_RETURN_IF_ERROR(JsonInt(config, "synth config: config.", "vocab_size", 0, 1 << 24, &vocab));
  // Each architecture chats in its family's format, with that family's specials.
  const auto parsed = ModelConfig::FromJson(config);
  if (!parsed.ok()) return parsed.status();
  const TokenizerFiles tok =
      MakeTokenizerFiles(static_cast<int>(vocab), SynthChatFamily(parsed->arch));
  if (!tok.error.empty()) return Status::Error(tok.error);
  config["bos_token_id"] = tok.bos_id >= 0 ? json(tok.bos_id) : json(nullptr);
  config["eos_token_id"] = tok.eos_id;

  auto writer = ContainerWriter::Create(out, config, spec.expert_fmt, overwrite, jobs);
  if (!writer.ok()) return writer.status();
  ContainerWriter& w = **writer;
  const ModelConfig& c = w.config();
  SynthReport report;

  // Routing concentration, calibrated on the first MoE layer's router
  // through its correction bias. A router without one (Qwen3-MoE's) routes
  // as its random weights do: its share is measured, not steered.
  std::vector<TensorSpec> specs = TrunkSpec(c);
  if (c.n_moe_layers() > 0) {
    const std::string gate =
        "model.layers." + std::to_string(c.first_moe_layer()) + ".block_sparse_moe.gate.";
    const auto named = [&](const std::string& n) {
      return std::find_if(specs.begin(), specs.end(), [&](const TensorSpec& s) { return s.name == n; });
    };
    const auto router = named(gate + "weight");
    const auto bias = named(gate + "e_score_correction_bias");
    const bool steer = bias != specs.end();
    const RoutingEstimate est = EstimateRouting(
        c, TensorValues(*router, spec.seed).All(Elements(*router)),
        [&](double skew) {
          if (!steer) return std::vector<float>();
          return TensorValues(*bias, spec.seed, static_cast<float>(skew), spec.anchor_experts)
              .All(Elements(*bias));
        },
        steer ? spec.route_skew : 0.0, spec.hot_share, spec.seed);
    report.route_skew = est.skew;
    report.hot_share = est.hot_share;
    report.independent_overlap = est.overlap;
  }

  for (const TensorSpec& s : specs) {
    Fmt fmt = Fmt::kF32;
    if (s.storage == Storage::kMatrix) {
      const bool ends8 = s.name == "model.embed_tokens.weight" ||
                         (s.name == "lm_head.weight" && spec.head_bits == 8);
      fmt = ends8 || spec.trunk_bits == 8 ? Fmt::kQ8G : Fmt::kQ4G;
    }
    const TensorValues values(s, spec.seed, static_cast<float>(report.route_skew),
                              spec.anchor_experts, c.zero_centered_norms);
    // K3's A_log is one value per head padded with zeros to head_dim, as released.
    const bool padded = c.arch == Arch::kKimiK3 && s.name.ends_with("A_log");
    const int64_t cols = s.shape.back();
    WASTE_RETURN_IF_ERROR(w.AddTensorRows(
        s.name, s.shape,
        [&](int64_t first, int64_t rows, float* dst) {
          values.FillRows(first, rows, dst);
          for (int64_t i = 0; padded && i < rows * cols; ++i)
            if ((first * cols + i) >= c.kda_heads) dst[i] = 0.f;
        },
        fmt));
  }
  if (progress) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char line[96];
    std::snprintf(line, sizeof line, "trunk: %zu tensors in %.2f s", specs.size(), s);
    progress(line);
  }

  for (int L = 0; L < c.n_layers; ++L) {
    if (!c.is_moe_layer(L)) continue;
    const auto l0 = std::chrono::steady_clock::now();
    WASTE_RETURN_IF_ERROR(w.AddCodebooks(L, Codebooks(w.quant(), spec.seed, L)));
    const RecordLayout lay = w.record_layout();
    const ExpertQuant q = w.quant();
    const uint64_t seed = spec.seed;
    WASTE_RETURN_IF_ERROR(w.WriteBank(
        L, [&](int e, std::span<uint8_t> rec) { FillExpert(lay, q, seed, L, e, rec); }));
    if (progress) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - l0).count();
      const double mb = static_cast<double>(lay.record_bytes) * c.n_experts / 1e6;
      char line[160];
      std::snprintf(line, sizeof line, "layer %d: %d experts, %.1f MB in %.2f s (%.0f MB/s)", L,
                    c.n_experts, mb, s, mb / std::max(s, 1e-9));
      progress(line);
    }
  }
  WASTE_RETURN_IF_ERROR(w.WriteFile("tokenizer.model", tok.tokenizer_model));
  WASTE_RETURN_IF_ERROR(w.WriteFile("specials.json", tok.specials_json));
  WASTE_RETURN_IF_ERROR(w.WriteFile("chat.json", tok.chat_json));
  WASTE_RETURN_IF_ERROR(w.Finish());
  report.bytes = w.bytes_written();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace waste
