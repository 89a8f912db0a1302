// Inside engine/model only: a MoE layer (moe.cc), the work buffers its
// model's MoE layers share, and the router lookahead that guesses a layer's
// experts ahead of its router (lookahead.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/experts/expert_source.h"
#include "engine/format/container.h"
#include "engine/model/layer.h"

namespace waste {

struct Routing;  // engine/model/router.h
class Lookahead;

// One thread's buffers for one expert at a time.
struct ExpertScratch {
  std::vector<float> g, u;            // [moe_inter]: gate and up outputs, then SiLU(g) * u
  std::vector<float> lut_down;        // [lut floats] of down's input
  std::vector<uint8_t> derived_down;  // [derived table bytes] of down's input
};

// A MoE layer's work buffers, kept from call to call and shared by every
// MoE layer of the model (one layer runs at a time; a set per layer would
// multiply them by the layer count). Allocated per layer and chunk they
// came back as fresh pages every time (43k page faults for one token at the
// 48B shapes, and a fresh page is slow on this VM); now they grow to the
// largest chunk seen and stay.
struct MoeScratch {
  std::vector<uint8_t> derived_gu;  // [T][2][derived table bytes] (split or int8 table)
  std::vector<float> luts;          // [T][2][lut floats]: float tables, when the product reads them
  std::vector<float> latent_in;     // [T][latent]: K3's routed experts' input
  std::vector<float> per_slot;      // [T][top_k][expert width]: each routed expert's output
  std::vector<float> shared_out;    // [T][hidden]: each token's shared-expert output
  // Scratch lent to the pool's threads, each to one chunk of a
  // ParallelFor at a time: at most one of each per thread is ever made.
  std::mutex tables_mu;
  std::vector<ExpertScratch> spare_experts;  // guarded by tables_mu

  // A spare ExpertScratch (or a new one), each buffer at least the size
  // given; give it back when done.
  ExpertScratch TakeExpertScratch(size_t inter, size_t lut_floats, size_t derived_bytes);
  void GiveBackExpertScratch(ExpertScratch x);
};

// What a model's MoE layers share.
struct MoeCommon {
  const Container& ct;     // the expert records' layout, the codebooks
  ExpertSource* experts;
  ModelConfig route;       // the config with top_k = the experts routed per token
  MoeScratch scratch;
};

// Routed experts from the expert source (router.cc chooses them), and the
// shared expert beside them when the layer has one.
class MoeLayer {
 public:
  // Resolves the router, K3's latent projections and the shared expert
  // under "block_sparse_moe.".
  MoeLayer(const LayerBuild& b, MoeCommon& common);

  // The layer on T tokens at `positions` ([T], for on_route): h and out
  // [T][hidden]. Routes every token, hints the chunk's distinct experts a
  // window at a time, builds the gate and up lookup tables once per token,
  // lets every pool thread take work from one list (records, shared
  // experts), and sums the weighted outputs in routing order. `ahead`: a
  // layer whose guessed experts the lookahead hints once this layer's own
  // first demand hints are out; -1 for none.
  Status Run(LayerContext& ctx, Lookahead& lookahead, std::span<const int> positions,
             const float* h, float* out, int ahead);
  // The router's logits on T inputs (h [T][hidden], logits [T][n_experts]):
  // its matrix read once for all of them (each row the bits of one MatVec,
  // so a token's logits do not depend on the chunk), plus its bias when it
  // has one.
  void RouterLogits(LayerContext& ctx, int T, const float* h, float* logits) const;
  // The router's correction bias (router.h; empty when the config has none).
  std::span<const float> router_bias() const { return router_bias_; }

 private:
  struct Users;
  struct Tables;
  // Run's steps: the router on each of the T inputs ([T][hidden]); the
  // tables' kinds and sizes (their buffers grown to T tokens); the gate and
  // up tables of every token's experts' input ([T][expert width]); the
  // routed and shared experts on the pool's threads, `hinted` of
  // users.wanted already hinted, into the scratch's per_slot and shared_out
  // (the time blocked in Acquire, averaged over the threads, in
  // *wait_seconds); and out = the weighted sum of those, in routing order.
  void RouteChunk(LayerContext& ctx, std::span<const int> positions, const float* h,
                  std::span<Routing> route);
  Tables PlanTables(LayerContext& ctx, int T);
  void BuildGateUpTables(LayerContext& ctx, int T, const float* h, const Tables& tables);
  // `xin` is what the routed experts read ([T][expert width]: h, or K3's
  // latent); the shared experts read h.
  Status RunExperts(LayerContext& ctx, int T, const float* h, const float* xin,
                    const Tables& tables, const Users& users, size_t hinted,
                    double* wait_seconds);
  void SumExperts(LayerContext& ctx, int T, std::span<const Routing> route, float* out);
  // One BF16R, MXFP4, INT4 or Q4GR expert record applied to the tokens (t, slot j)
  // routed to it: h is the chunk's [T][expert width] input, per_slot its
  // [T][top_k][expert width] output.
  void ApplyDirectExpert(LayerContext& ctx, const uint8_t* rec,
                         std::span<const std::pair<int, int>> who, const float* h,
                         float* per_slot);
  // Adds the record's biases of matrix m (gate, up, down) to y[rows of m],
  // when the config gives the experts biases.
  void AddExpertBias(const uint8_t* rec, int m, float* y) const;
  // The experts' activation as the config says, into g ([moe_inter]): the
  // biases of gate and up added first (u is changed too), then SiLU(g) * u
  // or GPT-OSS's clamped SwiGLU (ModelConfig::swiglu_limit).
  void ExpertActivation(const uint8_t* rec, float* g, float* u) const;
  // The same for a VQ record, on this thread, through the chunk's tables;
  // returns the seconds spent building down's tables.
  double ApplyVqExpert(const Tables& tables, const uint8_t* rec,
                       std::span<const std::pair<int, int>> who, ExpertScratch& x);

  const int L_;
  const ModelConfig& c_;
  MoeCommon& common_;
  const kernels::MatrixView* router_ = nullptr;
  std::span<const float> router_bias_;
  const float* router_logit_bias_ = nullptr;  // null when none
  // With a latent (c.latent > 0): the routed experts' down and up
  // projections and, with latent_norm, the norm of their weighted sum.
  const kernels::MatrixView *latent_down_ = nullptr, *latent_up_ = nullptr;
  const float* latent_norm_ = nullptr;
  std::unique_ptr<Mlp> shared_expert_;  // null when the layer has none
};

// How well the router lookahead guessed (model.h, LookaheadStats), and what
// it has guessed: the experts hinted for a layer, not yet demanded.
class Lookahead {
 public:
  // `first_moe`: the model's first MoE layer.
  Lookahead(const ModelConfig& c, const ModelOptions& opt, ExpertSource* experts,
            int first_moe);
  // Experts guessed per token; 0 when off.
  int top_k() const { return guess_config_.top_k; }
  // `moe`'s router (layer L's) on T hidden states ([T][hidden]): the union
  // of each one's best top_k() experts, most voted first, at most `cap`,
  // kept as layer L's guess.
  void Guess(LayerContext& ctx, const MoeLayer& moe, int L, int T, const float* h, size_t cap);
  // The next token's first MoE layer (`moe`) from one hidden state, kept
  // as its guess; HintNextToken hints it.
  void GuessNextToken(LayerContext& ctx, const MoeLayer& moe, const float* h, size_t cap);
  void HintNextToken();
  // Hints layer L's guess.
  void Hint(int L);
  // Counts what layer L demands (`wanted`, distinct) against what was guessed for it.
  void Score(int L, std::span<const int> wanted);
  const LookaheadStats& stats() const { return stats_; }
  const LookaheadStats& next_token_stats() const { return next_token_stats_; }

 private:
  std::vector<int> GuessExperts(LayerContext& ctx, const MoeLayer& moe, int T, const float* h,
                                size_t cap) const;

  ExpertSource* experts_;
  const int first_moe_;
  ModelConfig guess_config_;             // c with top_k = the experts guessed per token
  std::vector<std::vector<int>> guess_;  // [n_layers]: experts hinted for it, not yet demanded
  std::vector<int> next_token_guess_;    // for the first MoE layer of the next chunk
  LookaheadStats stats_, next_token_stats_;
};

}  // namespace waste
