// Inside engine/model only: what a Model is made of (its layers, the
// services they share, the head) and the forward pass over them
// (ForwardPass::Chunk). model.h's Model is its public face.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/model/layer.h"
#include "engine/model/model.h"
#include "engine/model/moe.h"

namespace waste {

// One layer, as its plan says: RMSNorm, attention, residual; RMSNorm,
// feed-forward, residual.
struct Layer {
  LayerPlan plan;
  const float* in_norm = nullptr;
  const float* post_norm = nullptr;
  std::unique_ptr<AttentionLayer> attention;
  std::unique_ptr<Mlp> mlp;       // plan.ffn == kDense
  std::unique_ptr<MoeLayer> moe;  // plan.ffn == kMoe
  // Attention Residuals (c.attn_res_block > 0): the norm weight and query of
  // the mix before the attention [0] and before the feed-forward [1].
  const float* res_norm[2] = {};
  const float* res_proj[2] = {};
};

class ForwardPass {
 public:
  // Every layer built from its plan (architecture.h) over `trunk`, built over `ct`.
  static Result<std::unique_ptr<ForwardPass>> Build(const Container& ct, ExpertSource* experts,
                                                    const ModelOptions& opt,
                                                    std::unique_ptr<Trunk> trunk);

  // One chunk of every item's tokens (Model::ForwardBatch's contract).
  // `all`: every token's logits, [tokens][vocab] at each item's `logits`,
  // instead of the last one's.
  Status Chunk(std::span<const Model::BatchItem> items, bool all);
  // Model::NewSession (session.cc): each layer's attention places its state.
  Session NewSession(int max_context) const;

  const Container& container() const { return ct_; }
  const ModelConfig& config() const { return c_; }
  const ModelOptions& options() const { return opt_; }
  ExpertSource* experts() const { return experts_; }
  const LayerContext& context() const { return ctx_; }
  const Lookahead& lookahead() const { return *lookahead_; }
  uint64_t attention_jobs() const { return attention_jobs_; }

 private:
  ForwardPass(const Container& ct, ExpertSource* experts, const ModelOptions& opt,
              std::unique_ptr<Trunk> trunk);
  Status Resolve();

  const Container& ct_;
  const ModelConfig& c_;
  ExpertSource* experts_;
  const ModelOptions opt_;
  LayerContext ctx_;
  const std::unique_ptr<Trunk> trunk_;
  NormWeights norms_;
  MoeCommon moe_;  // what the MoE layers share
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Lookahead> lookahead_;
  const kernels::MatrixView* lm_head_ = nullptr;
  const float* final_norm_ = nullptr;
  // Attention Residuals' output aggregation (K3), before the final norm.
  const float* out_res_norm_ = nullptr;
  const float* out_res_proj_ = nullptr;
  int first_moe_ = -1;           // the first MoE layer; -1: none
  bool bounded_ = false;         // a layer caches positions: a session holds max_context tokens
  uint64_t attention_jobs_ = 0;  // see Model::pool_jobs()
};

}  // namespace waste
