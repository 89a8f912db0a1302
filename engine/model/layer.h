// Inside engine/model only: what a layer is made of and what it is given.
//
// A layer's parts own their resolved weights, as kernel views, so that
// nothing is looked up by name at run time: its attention (an
// AttentionLayer, one class per LayerKind in its own file, made by the
// table in attention.cc) and its feed-forward (an Mlp, mlp.cc, or a
// MoeLayer, moe.h). Every part computes through a LayerContext, the
// services they share: the thread pool, the products and the roofline's
// counters, the model's rotation.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "engine/kernels/matvec.h"
#include "engine/kernels/thread_pool.h"
#include "engine/model/architecture.h"
#include "engine/model/model.h"
#include "engine/model/rotary.h"
#include "engine/model/trunk.h"

namespace waste {

// Wall time, for the phase times and the roofline's parts.
using Clock = std::chrono::steady_clock;
inline double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Pointers to n rows `step` floats apart from `base`: each token's input or
// output of a product over a chunk (LayerContext::MatVecMany and its kin).
template <class Float>  // float or const float
std::vector<Float*> RowPointers(Float* base, size_t n, size_t step) {
  std::vector<Float*> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = base + i * step;
  return p;
}

// The services every layer computes with, one per model: the pool, the
// products over it (each charged to the roofline's current part), the
// counters, and the model's rotation and softmax scale.
class LayerContext {
 public:
  LayerContext(const ModelConfig& c, const ModelOptions& opt);

  const ModelConfig& c;
  const ModelOptions& opt;
  kernels::ThreadPool pool;
  Rotary rotary;               // MLA's rope dims, or GQA's rotary dims
  float softmax_scale = 1.f;   // MLA's or GQA's
  // DSA: the choice of the chunk's last layer with an indexer, per token of
  // the chunk [T][position + 1], for the layers after it that share it.
  std::vector<std::vector<char>> dsa_keep;
  PhaseTimes times;
  // The part the products charge to: set by the calling thread before each
  // phase, read by the pool's threads inside it.
  StepPart charge = StepPart::kAttentionProducts;

  void MatVec(const kernels::MatrixView& w, const float* x, float* y);
  // Several products in one pass over the pool (one barrier): the bits of
  // one MatVec each (kernels::MatVecs).
  void MatVecs(std::initializer_list<kernels::MatVecJob> jobs);
  // One matrix times several inputs, its bytes read about once for all of
  // them: the bits of one MatVec each (kernels::MatVecMany).
  void MatVecMany(const kernels::MatrixView& w, std::span<const float* const> xs,
                  std::span<float* const> ys);
  void MatVecsMany(std::initializer_list<kernels::MatVecManyJob> jobs);
  // Adds to the roofline's part `p` (any thread).
  void Charge(StepPart p, double seconds, uint64_t bytes);
  StepParts parts() const;

 private:
  mutable std::mutex parts_mu_;
  StepParts parts_;  // guarded by parts_mu_
};

// Norm weights as the layers read them: with c.zero_centered_norms each
// RMSNorm's 1 + w in float32, made once at load and kept here; else the
// trunk's own vector.
class NormWeights {
 public:
  NormWeights(const Trunk& t, const ModelConfig& c) : t_(t), c_(c) {}
  // `name` is a trunk vector of n floats.
  const float* Get(const std::string& name, int n);

 private:
  const Trunk& t_;
  const ModelConfig& c_;
  std::vector<std::unique_ptr<std::vector<float>>> shifted_;  // each copy stays where it is
};

// What a layer's parts are built from.
struct LayerBuild {
  const Trunk& t;
  const ModelConfig& c;
  NormWeights& norms;
  int layer;           // L
  LayerPlan plan;      // the layer's
  std::string prefix;  // "model.layers.L."
};

// Session memory as a layer kind lays it out: each part starts on a 64-byte
// line. Counting (no base) sizes the session; carving hands out the parts.
class StateCarver {
 public:
  explicit StateCarver(float* base = nullptr) : next_(base) {}
  // n floats of the session's memory (empty while counting).
  std::span<float> Take(size_t n);
  // A recurrent kind's parts of layer L: its state and conv ring of `state`
  // and `ring` floats, then their spares (Session).
  void TakeRecurrent(Session& s, int L, size_t state, size_t ring);
  size_t floats() const { return total_; }  // all the parts so far, lines included

 private:
  float* next_;
  size_t total_ = 0;
};

// A layer's attention, one class per LayerKind, owning its resolved weights
// (its work buffers are Run's own, sized to the chunk). Made by
// MakeAttention (attention.cc) from the layer's plan.
class AttentionLayer {
 public:
  virtual ~AttentionLayer() = default;
  // Attention for the chunk's tokens in order: h and out [T][hidden], token
  // t of session owner[t] at positions[t], the session's first in the chunk
  // when positions[t] == owner[t]->position (the recurrent kinds start the
  // spare state from the committed one there: model.h, Session). Each kind
  // takes the chunk at once, its projections over every token and its heads
  // or recurrence token after token.
  virtual void Run(LayerContext& ctx, std::span<Session* const> owner,
                   std::span<const int> positions, const float* h, float* out) = 0;
  // What the kind keeps in a session of `s.max_context` tokens: its views
  // at its layer of `s`, taken from `carve` in order.
  virtual void PlaceState(const ModelConfig& c, Session& s, StateCarver& carve) const = 0;
  // Whether it keeps a row per position, which bounds a session to its
  // max_context tokens (a recurrent kind's state does not grow).
  virtual bool caches_positions() const = 0;
};

// The attention kinds, each in its own file: its weights resolved at layer
// b.layer ("self_attn." or "linear_attn." under b.prefix).
std::unique_ptr<AttentionLayer> MakeKda(const LayerBuild& b);            // kda.cc
std::unique_ptr<AttentionLayer> MakeGatedDeltaNet(const LayerBuild& b);  // gated_deltanet.cc
std::unique_ptr<AttentionLayer> MakeMla(const LayerBuild& b);            // mla.cc
std::unique_ptr<AttentionLayer> MakeGqa(const LayerBuild& b);            // gqa.cc
// The kind's maker from the table (attention.cc); null for a kind without an entry.
std::unique_ptr<AttentionLayer> MakeAttention(LayerKind kind, const LayerBuild& b);
// The model's one rotation and softmax scale into ctx (attention.cc).
void SetRotation(const ModelConfig& c, LayerContext& ctx);

// The rotation of the rope dims of MLA's q and k_pe: YaRN's as the config
// says, or none with mla_use_nope. The same for every MLA layer.
Rotary MlaRotary(const ModelConfig& c);
// (qk_nope + qk_rope)^-0.5, times the rotation's softmax factor.
float MlaSoftmaxScale(const ModelConfig& c, const Rotary& r);
// The rotation of the first rotary_dim dims of every GQA q and k head:
// rotate-half, plain RoPE or YaRN as the config says, YaRN's attention
// factor on cos and sin (HF's convention for these models).
Rotary GqaRotary(const ModelConfig& c);
// head_dim^-0.5.
float GqaSoftmaxScale(const ModelConfig& c);

// DeepSeek Sparse Attention's lightning indexer of one MLA layer (dsa.cc):
// its tensors under "<a>indexer.", a = the layer's "...self_attn.".
class DsaIndexer {
 public:
  DsaIndexer(const Trunk& t, const std::string& a);
  // A chunk's tokens from their normed hidden states hs and normed query
  // latents: each one's key [index_dim] (normed, rotated) into keys[t], its
  // queries q [T][index_heads][index_dim] (rotated) and head weights
  // w [T][index_heads] (times index_heads^-0.5).
  void Project(LayerContext& ctx, std::span<const float* const> hs,
               std::span<const float* const> q_latents, std::span<const int> positions,
               std::span<float* const> keys, std::vector<float>& q, std::vector<float>& w) const;
  // The positions [0, pos] a token at pos attends (keep, DsaSelect): its
  // queries q and weights w against the keys of positions [0, pos], `stride`
  // floats apart from `keys`.
  void Select(LayerContext& ctx, const float* keys, int stride, int pos, const float* q,
              const float* w, std::vector<char>& keep) const;

 private:
  // MLA's rotation of the rope dims, on the indexer's pairs.
  static Rotary Rotation(const LayerContext& ctx);

  const kernels::MatrixView* wq_b_;     // [heads * dim][q_lora]
  const kernels::MatrixView* wk_;       // [dim][hidden]
  const kernels::MatrixView* weights_;  // [heads][hidden]
  const float* k_norm_;                 // [dim]
  const float* k_bias_;                 // [dim]
};

// A dense MLP (mlp.cc), down(SiLU(gate(h)) * up(h)) (K3: SiTU): a dense
// layer's feed-forward and a MoE layer's shared expert.
class Mlp {
 public:
  // `prefix` + {gate,up,down}_proj.weight; `shared_gate`: Qwen3-Next's
  // shared_expert_gate, by which the output is scaled (sigmoid(gate . h)),
  // or null.
  Mlp(const Trunk& t, const std::string& prefix,
      const kernels::MatrixView* shared_gate = nullptr);
  // On several tokens at once: outs[t] from hs[t], each the bits it has alone.
  void Run(LayerContext& ctx, std::span<const float* const> hs,
           std::span<float* const> outs) const;

 private:
  const kernels::MatrixView *gate_, *up_, *down_;
  const kernels::MatrixView* shared_gate_;
};

}  // namespace waste
