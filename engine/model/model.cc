#include "engine/model/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/format/encoding.h"
#include "engine/kernels/vq.h"
#include "engine/model/attn_res.h"
#include "engine/model/layer.h"
#include "engine/model/norms.h"
#include "engine/model/router.h"

namespace waste {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// What Model::Load refuses whatever the trunk.
Status CheckLoad(const Container& ct, ExpertSource* experts, const ModelOptions& opt) {
  const ModelConfig& c = ct.config();
  if (c.tie_embeddings) return Status::Error("tie_word_embeddings is not implemented");
  if (opt.chunk < 1) return Status::Error("chunk must be at least 1");
  if (opt.lookahead < 0) return Status::Error("lookahead must be at least 0");
  if (opt.experts_per_token != 0 && (c.n_moe_layers() == 0 || c.top_k < 1))
    return Status::Error("experts per token " + std::to_string(opt.experts_per_token) +
                         ": this model has no routed experts");
  if (opt.experts_per_token < 0 || opt.experts_per_token > c.top_k)
    return Status::Error("experts per token " + std::to_string(opt.experts_per_token) +
                         ": must be 1 to the model's top_k, " + std::to_string(c.top_k));
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
      guess_config_(c_),
      route_config_(c_) {
  if (opt.experts_per_token > 0) route_config_.top_k = opt.experts_per_token;
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
  auto plans = PlanLayers(c_);
  if (!plans.ok()) return plans.status();
  shifted_norms_.reserve(4 * static_cast<size_t>(c_.n_layers) + 1);  // the pointers stay valid
  for (int L = 0; L < c_.n_layers; ++L) {
    auto l = std::make_unique<Layer>();
    const std::string p = "model.layers." + std::to_string(L) + ".";
    const std::string a = p + "self_attn.";
    l->plan = (*plans)[L];
    l->in_norm = NormWeights(p + "input_layernorm.weight", c_.hidden);
    l->post_norm = NormWeights(p + "post_attention_layernorm.weight", c_.hidden);
    switch (l->plan.attention) {
      case LayerKind::kKda:
        l->kda = ResolveKda(t, c_, a);
        break;
      case LayerKind::kGatedDeltaNet:
        l->gdn = ResolveGatedDeltaNet(t, p + "linear_attn.");
        break;
      case LayerKind::kMla:
        l->mla = ResolveMla(t, c_, a);
        break;
      case LayerKind::kGqa:
        l->gqa = ResolveGqa(t, c_, a);
        l->gqa.window = c_.attn_window[static_cast<size_t>(L)];
        if (c_.zero_centered_norms && c_.qk_norm) {  // Qwen3-Next's q_norm and k_norm too
          l->gqa.q_norm = NormWeights(a + "q_norm.weight", c_.head_dim);
          l->gqa.k_norm = NormWeights(a + "k_norm.weight", c_.head_dim);
        }
        break;
    }
    auto set_mlp = [&](const MlpWeights& w) { l->gate = w.gate, l->up = w.up, l->down = w.down; };
    switch (l->plan.ffn) {
      case FfnKind::kDense:
        set_mlp(ResolveMlp(t, p + "mlp."));
        break;
      case FfnKind::kMoe: {
        const std::string m = p + "block_sparse_moe.";
        l->router = &t.Matrix(m + "gate.weight");
        if (c_.router_bias)
          l->router_bias = {t.Vector(m + "gate.e_score_correction_bias"),
                            static_cast<size_t>(c_.n_experts)};
        if (c_.router_logit_bias) l->router_logit_bias = t.Vector(m + "gate.bias");
        if (c_.latent > 0) {
          l->latent_down = &t.Matrix(m + "routed_expert_down_proj.weight");
          l->latent_up = &t.Matrix(m + "routed_expert_up_proj.weight");
          if (c_.latent_norm) l->latent_norm = t.Vector(m + "routed_expert_norm.weight");
        }
        if (l->plan.shared_expert && c_.shared_expert_gate) {
          set_mlp(ResolveMlp(t, m + "shared_expert."));
          l->shared_gate = &t.Matrix(m + "shared_expert_gate.weight");
        } else if (l->plan.shared_expert) {
          set_mlp(ResolveMlp(t, m + "shared_experts."));
        }
        break;
      }
    }
    if (c_.attn_res_block > 0) {
      const char* sub[2] = {"self_attention_res_", "mlp_res_"};
      for (int i = 0; i < 2; ++i) {
        l->res_norm[i] = t.Vector(p + sub[i] + "norm.weight");
        l->res_proj[i] = t.Vector(p + sub[i] + "proj.weight");
      }
    }
    if (l->plan.ffn == FfnKind::kMoe && first_moe_ < 0) first_moe_ = L;
    layers_.push_back(std::move(l));
  }
  lm_head_ = &t.Matrix("lm_head.weight");
  final_norm_ = NormWeights("model.norm.weight", c_.hidden);
  if (c_.attn_res_block > 0) {
    out_res_norm_ = t.Vector("model.output_attn_res_norm.weight");
    out_res_proj_ = t.Vector("model.output_attn_res_proj.weight");
  }

  // One rotation and scale for the model's attention: no family mixes MLA
  // and GQA layers (PlanLayers has checked the kinds against the family).
  const bool gqa = std::count(c_.layer_kind.begin(), c_.layer_kind.end(), LayerKind::kGqa) > 0;
  rotary_ = gqa ? GqaRotary(c_) : MlaRotary(c_);
  softmax_scale_ = gqa ? GqaSoftmaxScale(c_) : MlaSoftmaxScale(c_, rotary_);
  return Status::Ok();
}

const float* Model::NormWeights(const std::string& name, int n) {
  const float* w = trunk_->Vector(name);
  if (!c_.zero_centered_norms) return w;
  std::vector<float>& shifted = shifted_norms_.emplace_back(n);
  for (int i = 0; i < n; ++i) shifted[i] = 1.f + w[i];
  return shifted.data();
}

void Model::MatVec(const kernels::MatrixView& w, const float* x, float* y) {
  MatVecs({{&w, x, y}});
}

void Model::MatVecMany(const kernels::MatrixView& w, std::span<const float* const> xs,
                       std::span<float* const> ys) {
  const auto t = Clock::now();
  kernels::MatVecMany(pool_, w, xs, ys, 32, opt_.isa, opt_.q4_input);
  Charge(charge_, Since(t), kernels::MatrixBytes(w));
}

void Model::MatVecsMany(std::initializer_list<kernels::MatVecManyJob> jobs) {
  const auto t = Clock::now();
  kernels::MatVecsMany(pool_, {jobs.begin(), jobs.size()}, 32, opt_.isa, opt_.q4_input);
  uint64_t bytes = 0;
  for (const kernels::MatVecManyJob& j : jobs) bytes += kernels::MatrixBytes(*j.w);
  Charge(charge_, Since(t), bytes);
}

void Model::MatVecs(std::initializer_list<kernels::MatVecJob> jobs) {
  const auto t = Clock::now();
  kernels::MatVecs(pool_, {jobs.begin(), jobs.size()}, 32, opt_.isa, opt_.q4_input);
  uint64_t bytes = 0;
  for (const kernels::MatVecJob& j : jobs) bytes += kernels::MatrixBytes(*j.w);
  Charge(charge_, Since(t), bytes);
}

void Model::Charge(StepPart p, double seconds, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(parts_mu_);
  parts_.seconds[static_cast<int>(p)] += seconds;
  parts_.bytes[static_cast<int>(p)] += bytes;
}

StepParts Model::step_parts() const {
  std::lock_guard<std::mutex> lock(parts_mu_);
  return parts_;
}

const char* StepPartName(StepPart p) {
  switch (p) {
    case StepPart::kAttentionProducts: return "attention_products";
    case StepPart::kRouter: return "router";
    case StepPart::kLookahead: return "lookahead";
    case StepPart::kGateUpTables: return "gate_up_tables";
    case StepPart::kLatentProducts: return "latent_products";
    case StepPart::kRoutedExperts: return "routed_experts";
    case StepPart::kDownTables: return "down_tables";
    case StepPart::kSharedExperts: return "shared_experts";
    case StepPart::kDenseMlp: return "dense_mlp";
    case StepPart::kHead: return "head";
    case StepPart::kCount: break;
  }
  return "?";
}

void Model::Attention(int L, std::span<Session* const> owner, std::span<const int> positions,
                      const float* h, float* out) {
  switch (layers_[L]->plan.attention) {
    case LayerKind::kKda:
      return Kda(L, owner, positions, h, out);
    case LayerKind::kMla:
      return Mla(L, owner, positions, h, out);
    case LayerKind::kGqa:
      return Gqa(L, owner, positions, h, out);
    case LayerKind::kGatedDeltaNet:
      return GatedDeltaNet(L, owner, positions, h, out);
  }
}

Status Model::ForwardChunk(std::span<const BatchItem> items, bool all) {
  const int hid = c_.hidden;
  // Layers other than the recurrent kinds keep a cache of max_context positions.
  const bool bounded =
      c_.n_kda_layers() + c_.n_layers_of(LayerKind::kGatedDeltaNet) < c_.n_layers;
  // The chunk's tokens, item after item: each one's session and position.
  std::vector<int> ids, positions;
  std::vector<Session*> owner;
  for (const BatchItem& it : items) {
    Session& s = *it.session;
    const int n = static_cast<int>(it.tokens.size());
    if (s.position + n > s.max_context && bounded)
      return Status::Error("context is full (" + std::to_string(s.max_context) + " tokens)");
    for (int i = 0; i < n; ++i) {
      ids.push_back(it.tokens[i]);
      positions.push_back(s.position + i);
      owner.push_back(&s);
    }
  }
  const int T = static_cast<int>(ids.size());
  std::vector<float> x(static_cast<size_t>(T) * hid), hn(static_cast<size_t>(T) * hid),
      y(static_cast<size_t>(T) * hid);
  // The lookahead's own input, so that nothing the real path reads is
  // written: [T][hidden], allocated only when the lookahead is on.
  std::vector<float> guess_in(guess_config_.top_k > 0 ? static_cast<size_t>(T) * hid : 0);
  // Lookahead records hinted per layer and chunk: a long chunk's guesses
  // must not flood a small cache, so no more than the demand window.
  const size_t cap = static_cast<size_t>(std::max(1, opt_.prefetch));
  for (int t = 0; t < T; ++t)
    WASTE_RETURN_IF_ERROR(trunk_->EmbeddingRow(ids[t], x.data() + static_cast<size_t>(t) * hid));
  // Attention Residuals (K3): x is then each token's running sum of the
  // current block, `blocks` its block representations ([T][nb_max][hidden],
  // the embedding first), and each sublayer reads the AttnRes mix of the
  // two, built in `mix` ([T][hidden]).
  const bool ares = c_.attn_res_block > 0;
  const size_t nb_max = static_cast<size_t>(c_.attn_res_blocks());
  std::vector<float> blocks(ares ? T * nb_max * hid : 0), mix(ares ? x.size() : 0);
  int nb = 0;  // block representations so far, the same for every token
  for (int L = 0; L < c_.n_layers; ++L) {
    const Layer& l = *layers_[L];
    const auto ta = Clock::now();
    const uint64_t ja = pool_.jobs();
    charge_ = StepPart::kAttentionProducts;
    // A block starts here: the running sum becomes its representation, and
    // the new block's sum starts at the attention's output.
    const bool block_starts = ares && L % c_.attn_res_block == 0;
    // Each token's input to the attention, then the attention for the
    // chunk, then each token's residual and the FFN's input: a token's
    // arithmetic is its own in every step, so the phases give its bits.
    const int nbt = nb + (block_starts ? 1 : 0);
    for (int t = 0; t < T; ++t) {
      float* xt = x.data() + static_cast<size_t>(t) * hid;
      float* ht = hn.data() + static_cast<size_t>(t) * hid;
      if (!ares) {
        RmsNorm(xt, l.in_norm, hid, c_.rms_eps, ht);
        continue;
      }
      float* bt = blocks.data() + static_cast<size_t>(t) * nb_max * hid;
      float* mt = mix.data() + static_cast<size_t>(t) * hid;
      if (nb > 0)
        AttnRes(bt, nb, xt, l.res_norm[0], l.res_proj[0], hid, c_.rms_eps, mt);
      else
        std::copy(xt, xt + hid, mt);
      if (block_starts) std::copy(xt, xt + hid, bt + static_cast<size_t>(nb) * hid);
      RmsNorm(mt, l.in_norm, hid, c_.rms_eps, ht);
    }
    Attention(L, owner, positions, hn.data(), y.data());
    for (int t = 0; t < T; ++t) {
      float* xt = x.data() + static_cast<size_t>(t) * hid;
      float* ht = hn.data() + static_cast<size_t>(t) * hid;
      float* yt = y.data() + static_cast<size_t>(t) * hid;
      if (!ares) {
        for (int i = 0; i < hid; ++i) xt[i] += yt[i];
        RmsNorm(xt, l.post_norm, hid, c_.rms_eps, ht);
        continue;
      }
      float* bt = blocks.data() + static_cast<size_t>(t) * nb_max * hid;
      float* mt = mix.data() + static_cast<size_t>(t) * hid;
      if (block_starts)
        std::copy(yt, yt + hid, xt);
      else
        for (int i = 0; i < hid; ++i) xt[i] += yt[i];
      AttnRes(bt, nbt, xt, l.res_norm[1], l.res_proj[1], hid, c_.rms_eps, mt);
      RmsNorm(mt, l.post_norm, hid, c_.rms_eps, ht);
    }
    if (block_starts) ++nb;
    times_.attention += Since(ta);
    attention_jobs_ += pool_.jobs() - ja;
    // Lookahead: the next layer's router (when it has one) on the residual
    // as it stands, normed with that layer's own post-attention norm, as its
    // router will see it two residual updates later. On kl48b this guessed
    // 81.4% right at 8 per token, against 80.7% through this layer's norm
    // (the state this layer's FFN sees) and 75.2% unnormed
    // (docs/log/2026-11-30-issues-3-to-5.md, "router lookahead").
    const bool next_moe = L + 1 < c_.n_layers && layers_[L + 1]->plan.ffn == FfnKind::kMoe;
    const int ahead = guess_config_.top_k > 0 && next_moe ? L + 1 : -1;
    if (ahead >= 0) {
      const auto tl = Clock::now();
      charge_ = StepPart::kLookahead;
      const float* stream = ares ? mix.data() : x.data();  // with AttnRes, the FFN's mix
      for (int t = 0; t < T; ++t)
        RmsNorm(stream + static_cast<size_t>(t) * hid, layers_[ahead]->post_norm, hid, c_.rms_eps,
                guess_in.data() + static_cast<size_t>(t) * hid);
      guess_[ahead] = GuessExperts(ahead, T, guess_in.data(), cap);
      times_.lookahead += Since(tl);
    }
    if (l.plan.ffn == FfnKind::kMoe) {
      WASTE_RETURN_IF_ERROR(MoeChunk(L, positions, hn.data(), y.data(), ahead));
    } else {
      if (ahead >= 0) HintGuess(ahead);
      const auto to = Clock::now();
      charge_ = StepPart::kDenseMlp;
      const size_t n = static_cast<size_t>(T), step = static_cast<size_t>(hid);
      DenseMlp(L, RowPointers<const float>(hn.data(), n, step), RowPointers(y.data(), n, step));
      times_.other += Since(to);
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  if (ares && nb > 0) {  // the output aggregation: every block and the last sum, in place
    for (int t = 0; t < T; ++t) {
      float* xt = x.data() + static_cast<size_t>(t) * hid;
      AttnRes(blocks.data() + static_cast<size_t>(t) * nb_max * hid, nb, xt, out_res_norm_,
              out_res_proj_, hid, c_.rms_eps, xt);
    }
  }
  if (opt_.lookahead_next_token && guess_config_.top_k > 0 && first_moe_ >= 0) {
    // The next token's first MoE layer, from this chunk's last final state.
    const auto tl = Clock::now();
    charge_ = StepPart::kLookahead;
    const int first = first_moe_;
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
  // The LM head, the trunk's largest matrix, read once for every row wanted.
  std::vector<const float*> head_in;
  std::vector<float*> head_out;
  int end = 0;  // one past the item's last token in the chunk
  for (const BatchItem& it : items) {
    const int n = static_cast<int>(it.tokens.size());
    end += n;
    for (int t = all ? end - n : end - 1; t < end; ++t) {
      float* ht = hn.data() + static_cast<size_t>(t) * hid;
      RmsNorm(x.data() + static_cast<size_t>(t) * hid, final_norm_, hid, c_.rms_eps, ht);
      head_in.push_back(ht);
      head_out.push_back(it.logits + (all ? static_cast<size_t>(t - (end - n)) * c_.vocab : 0));
    }
  }
  kernels::MatVecMany(pool_, *lm_head_, head_in, head_out, 32, opt_.isa, opt_.q4_input);
  const double head = Since(th);
  times_.other += head;
  Charge(StepPart::kHead, head, kernels::MatrixBytes(*lm_head_));
  // The commit: the recurrent states this chunk computed become the sessions'.
  for (const BatchItem& it : items) {
    Session& s = *it.session;
    std::swap(s.kda_state, s.kda_spare);
    std::swap(s.conv_ring, s.conv_spare);
    s.position += static_cast<int>(it.tokens.size());
  }
  return Status::Ok();
}

Status Model::CheckTokens(std::span<const int> tokens) const {
  if (tokens.empty()) return Status::Error("no tokens to run");
  for (int id : tokens)
    if (id < 0 || id >= c_.vocab)
      return Status::Error("token id " + std::to_string(id) + " is outside the vocabulary of " +
                           std::to_string(c_.vocab));
  return Status::Ok();
}

Status Model::Forward(Session& s, std::span<const int> tokens, float* logits,
                      std::vector<float>* all_logits) {
  WASTE_RETURN_IF_ERROR(CheckTokens(tokens));
  if (all_logits) all_logits->assign(tokens.size() * static_cast<size_t>(c_.vocab), 0.f);
  std::vector<float> last(c_.vocab);
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(opt_.chunk)) {
    const auto part = tokens.subspan(at, std::min<size_t>(opt_.chunk, tokens.size() - at));
    float* dst = all_logits ? all_logits->data() + at * static_cast<size_t>(c_.vocab) : last.data();
    const BatchItem item{&s, part, dst};
    WASTE_RETURN_IF_ERROR(ForwardChunk({&item, 1}, all_logits != nullptr));
    if (experts_) experts_->TokensDone(static_cast<int>(part.size()));  // none in a dense model
  }
  if (logits) {
    const float* src =
        all_logits ? all_logits->data() + (tokens.size() - 1) * static_cast<size_t>(c_.vocab)
                   : last.data();
    std::copy(src, src + c_.vocab, logits);
  }
  return Status::Ok();
}

Status Model::ForwardBatch(std::span<const BatchItem> items) {
  if (items.empty()) return Status::Error("no sequences to run");
  size_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].session || !items[i].logits) return Status::Error("a batch item without a session or logits");
    WASTE_RETURN_IF_ERROR(CheckTokens(items[i].tokens));
    for (size_t j = 0; j < i; ++j)
      if (items[j].session == items[i].session)
        return Status::Error("a session appears twice in one batch");
    total += items[i].tokens.size();
  }
  WASTE_RETURN_IF_ERROR(ForwardChunk(items, false));
  if (experts_) experts_->TokensDone(static_cast<int>(total));
  return Status::Ok();
}

}  // namespace waste
