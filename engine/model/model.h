// The forward pass of Kimi-Linear and the DeepSeek-V3 family.
//
// A Model holds the weights (the resident trunk and an expert source) and
// computes; a Session holds one conversation's state. Tokens go through in
// chunks: within a chunk each token runs attention in order, and the MoE
// layers gather the chunk's distinct experts so that each is acquired once
// and applied to every token routed to it. Every per-token result is
// computed by the same operations in the same order whatever the chunk size,
// the thread count or where the expert records came from, so logits are
// bit-identical across those choices.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/experts/expert_source.h"
#include "engine/format/container.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/thread_pool.h"
#include "engine/model/trunk.h"

namespace waste {

// One conversation's state: what the model remembers between tokens.
struct Session {
  int position = 0;     // tokens seen
  int max_context = 0;  // capacity of the latent KV cache
  // Per layer; empty where the layer kind does not use it.
  std::vector<std::vector<float>> kda_state;  // [heads][head_dim (k)][head_dim (v)]
  std::vector<std::vector<float>> conv_ring;  // [3 (q,k,v)][kernel-1][kda_width], oldest first
  std::vector<std::vector<float>> latent_kv;  // [max_context][kv_lora + qk_rope] (k_pe rotated)

  uint64_t state_bytes() const;
};

// Time spent per phase of the forward pass, for `waste bench`.
struct PhaseTimes {
  double attention = 0, experts = 0, expert_wait = 0, other = 0;
};

struct ModelOptions {
  int threads = 0;  // 0: every CPU this process may use
  kernels::Isa isa = kernels::BestIsa();
  int chunk = 32;     // prefill tokens per chunk
  int prefetch = 16;  // expert records asked for ahead of their use within a layer
  // Called with every token's routed experts at every MoE layer (for traces).
  std::function<void(int position, int layer, std::span<const int> experts)> on_route;
};

class Model {
 public:
  // Builds the model over `ct` (which must outlive it) with experts from
  // `experts`. Refuses, by name, anything in the config it does not implement.
  static Result<std::unique_ptr<Model>> Load(const Container& ct, ExpertSource* experts,
                                             const ModelOptions& opt);
  // The same over a trunk the caller built, e.g. Trunk::Over on the daemon's
  // shared segment; `trunk` must have been built over `ct` itself.
  static Result<std::unique_ptr<Model>> Load(const Container& ct, ExpertSource* experts,
                                             const ModelOptions& opt, std::unique_ptr<Trunk> trunk);
  ~Model();

  const ModelConfig& config() const { return c_; }
  const Container& container() const { return ct_; }
  int threads() const { return pool_.size(); }

  Session NewSession(int max_context) const;

  // Runs `tokens` at the session's position, in chunks of options.chunk.
  // `logits` receives the last token's logits ([vocab]) when non-null;
  // `all_logits` every token's ([tokens][vocab]) when non-null.
  Status Forward(Session& s, std::span<const int> tokens, float* logits,
                 std::vector<float>* all_logits = nullptr);

  const PhaseTimes& times() const { return times_; }
  // Attention constants, for tests against a reference.
  std::span<const float> rope_inv_freq() const { return inv_freq_; }
  float softmax_scale() const { return softmax_scale_; }

 private:
  struct Layer;
  Model(const Container& ct, ExpertSource* experts, const ModelOptions& opt);
  Status Resolve();
  Status ForwardChunk(Session& s, std::span<const int> tokens, float* logits_out, bool all);
  void Attention(int L, Session& s, int pos, const float* h, float* out);
  void Kda(int L, Session& s, const float* h, float* out);
  void Mla(int L, Session& s, int pos, const float* h, float* out);
  Status MoeChunk(int L, int position, int T, const float* h, float* out);
  void DenseMlp(int L, const float* h, float* out);
  void MatVec(const kernels::MatrixView& w, const float* x, float* y);
  void RotaryInPlace(float* v, int pos) const;  // the rope dims of one head or k_pe

  const Container& ct_;
  const ModelConfig& c_;
  ExpertSource* experts_;
  ModelOptions opt_;
  kernels::ThreadPool pool_;
  std::unique_ptr<Trunk> trunk_;
  std::vector<std::unique_ptr<Layer>> layers_;
  const kernels::MatrixView* lm_head_ = nullptr;
  const float* final_norm_ = nullptr;
  std::vector<float> inv_freq_;  // rope: [qk_rope / 2]
  float softmax_scale_ = 1.f;
  PhaseTimes times_;
};

}  // namespace waste
