// The forward pass: every layer built from its plan (ForwardPass::Resolve),
// and one chunk of one or several sessions through them
// (ForwardPass::Chunk; K3's Attention Residuals around each sublayer and at
// the output).

#include "engine/model/forward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "engine/model/attn_res.h"
#include "engine/model/norms.h"

namespace waste {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

ForwardPass::ForwardPass(const Container& ct, ExpertSource* experts, const ModelOptions& opt,
                         std::unique_ptr<Trunk> trunk)
    : ct_(ct),
      c_(ct.config()),
      experts_(experts),
      opt_(opt),
      ctx_(c_, opt_),
      trunk_(std::move(trunk)),
      norms_(*trunk_, c_),
      moe_{ct, experts, c_, {}} {
  if (opt.experts_per_token > 0) moe_.route.top_k = opt.experts_per_token;
}

Result<std::unique_ptr<ForwardPass>> ForwardPass::Build(const Container& ct,
                                                        ExpertSource* experts,
                                                        const ModelOptions& opt,
                                                        std::unique_ptr<Trunk> trunk) {
  std::unique_ptr<ForwardPass> f(new ForwardPass(ct, experts, opt, std::move(trunk)));
  WASTE_RETURN_IF_ERROR(f->Resolve());
  return f;
}

Status ForwardPass::Resolve() {
  const Trunk& t = *trunk_;
  auto plans = PlanLayers(c_);
  if (!plans.ok()) return plans.status();
  for (int L = 0; L < c_.n_layers; ++L) {
    auto l = std::make_unique<Layer>();
    const std::string p = "model.layers." + std::to_string(L) + ".";
    l->plan = (*plans)[L];
    l->in_norm = norms_.Get(p + "input_layernorm.weight", c_.hidden);
    l->post_norm = norms_.Get(p + "post_attention_layernorm.weight", c_.hidden);
    const LayerBuild b{t, c_, norms_, L, l->plan, p};
    l->attention = MakeAttention(l->plan.attention, b);
    if (!l->attention)
      return Status::Error("layer " + std::to_string(L) + ": an attention kind without a maker");
    switch (l->plan.ffn) {
      case FfnKind::kDense:
        l->mlp = std::make_unique<Mlp>(t, p + "mlp.");
        break;
      case FfnKind::kMoe:
        l->moe = std::make_unique<MoeLayer>(b, moe_);
        break;
    }
    if (c_.attn_res_block > 0) {
      const char* sub[2] = {"self_attention_res_", "mlp_res_"};
      for (int i = 0; i < 2; ++i) {
        l->res_norm[i] = t.Vector(p + sub[i] + "norm.weight");
        l->res_proj[i] = t.Vector(p + sub[i] + "proj.weight");
      }
    }
    if (l->plan.ffn == FfnKind::kMoe && first_moe_ < 0) first_moe_ = L;
    bounded_ = bounded_ || l->attention->caches_positions();
    layers_.push_back(std::move(l));
  }
  lookahead_ = std::make_unique<Lookahead>(c_, opt_, experts_, first_moe_);
  lm_head_ = &t.Matrix("lm_head.weight");
  final_norm_ = norms_.Get("model.norm.weight", c_.hidden);
  if (c_.attn_res_block > 0) {
    out_res_norm_ = t.Vector("model.output_attn_res_norm.weight");
    out_res_proj_ = t.Vector("model.output_attn_res_proj.weight");
  }
  SetRotation(c_, ctx_);
  return Status::Ok();
}

Status ForwardPass::Chunk(std::span<const Model::BatchItem> items, bool all) {
  const int hid = c_.hidden;
  // The chunk's tokens, item after item: each one's session and position.
  std::vector<int> ids, positions;
  std::vector<Session*> owner;
  for (const Model::BatchItem& it : items) {
    Session& s = *it.session;
    const int n = static_cast<int>(it.tokens.size());
    if (s.position + n > s.max_context && bounded_)
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
  std::vector<float> guess_in(lookahead_->top_k() > 0 ? static_cast<size_t>(T) * hid : 0);
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
    const uint64_t ja = ctx_.pool.jobs();
    ctx_.charge = StepPart::kAttentionProducts;
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
    l.attention->Run(ctx_, owner, positions, hn.data(), y.data());
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
    ctx_.times.attention += Since(ta);
    attention_jobs_ += ctx_.pool.jobs() - ja;
    // Lookahead: the next layer's router (when it has one) on the residual
    // as it stands, normed with that layer's own post-attention norm, as its
    // router will see it two residual updates later. On kl48b this guessed
    // 81.4% right at 8 per token, against 80.7% through this layer's norm
    // (the state this layer's FFN sees) and 75.2% unnormed
    // (docs/log/2026-11-30-issues-3-to-5.md, "router lookahead").
    const bool next_moe = L + 1 < c_.n_layers && layers_[L + 1]->plan.ffn == FfnKind::kMoe;
    const int ahead = lookahead_->top_k() > 0 && next_moe ? L + 1 : -1;
    if (ahead >= 0) {
      const auto tl = Clock::now();
      ctx_.charge = StepPart::kLookahead;
      const float* stream = ares ? mix.data() : x.data();  // with AttnRes, the FFN's mix
      for (int t = 0; t < T; ++t)
        RmsNorm(stream + static_cast<size_t>(t) * hid, layers_[ahead]->post_norm, hid, c_.rms_eps,
                guess_in.data() + static_cast<size_t>(t) * hid);
      lookahead_->Guess(ctx_, *layers_[ahead]->moe, ahead, T, guess_in.data(), cap);
      ctx_.times.lookahead += Since(tl);
    }
    if (l.plan.ffn == FfnKind::kMoe) {
      WASTE_RETURN_IF_ERROR(l.moe->Run(ctx_, *lookahead_, positions, hn.data(), y.data(), ahead));
    } else {
      if (ahead >= 0) lookahead_->Hint(ahead);
      const auto to = Clock::now();
      ctx_.charge = StepPart::kDenseMlp;
      const size_t n = static_cast<size_t>(T), step = static_cast<size_t>(hid);
      l.mlp->Run(ctx_, RowPointers<const float>(hn.data(), n, step),
                 RowPointers(y.data(), n, step));
      ctx_.times.other += Since(to);
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
  if (opt_.lookahead_next_token && lookahead_->top_k() > 0 && first_moe_ >= 0) {
    // The next token's first MoE layer, from this chunk's last final state.
    const auto tl = Clock::now();
    ctx_.charge = StepPart::kLookahead;
    const int first = first_moe_;
    std::vector<float> v(hid);  // [hidden]
    RmsNorm(x.data() + static_cast<size_t>(T - 1) * hid, layers_[first]->post_norm, hid, c_.rms_eps,
            v.data());
    lookahead_->GuessNextToken(ctx_, *layers_[first]->moe, v.data(), cap);
    ctx_.times.lookahead += Since(tl);
    lookahead_->HintNextToken();
  }
  const auto th = Clock::now();
  // The LM head, the trunk's largest matrix, read once for every row wanted.
  std::vector<const float*> head_in;
  std::vector<float*> head_out;
  int end = 0;  // one past the item's last token in the chunk
  for (const Model::BatchItem& it : items) {
    const int n = static_cast<int>(it.tokens.size());
    end += n;
    for (int t = all ? end - n : end - 1; t < end; ++t) {
      float* ht = hn.data() + static_cast<size_t>(t) * hid;
      RmsNorm(x.data() + static_cast<size_t>(t) * hid, final_norm_, hid, c_.rms_eps, ht);
      head_in.push_back(ht);
      head_out.push_back(it.logits + (all ? static_cast<size_t>(t - (end - n)) * c_.vocab : 0));
    }
  }
  kernels::MatVecMany(ctx_.pool, *lm_head_, head_in, head_out, 32, opt_.isa, opt_.q4_input);
  const double head = Since(th);
  ctx_.times.other += head;
  ctx_.Charge(StepPart::kHead, head, kernels::MatrixBytes(*lm_head_));
  // The commit: the recurrent states this chunk computed become the sessions'.
  for (const Model::BatchItem& it : items) {
    Session& s = *it.session;
    std::swap(s.state, s.state_spare);
    std::swap(s.ring, s.ring_spare);
    s.position += static_cast<int>(it.tokens.size());
  }
  return Status::Ok();
}

}  // namespace waste
