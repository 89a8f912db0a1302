// The engine's public face: a Model runs tokens of a Session through the
// forward pass of Kimi-Linear, the DeepSeek-V3 family, Qwen3-MoE, GLM-4.5,
// GPT-OSS, Qwen3-Next and Kimi K3.
//
// Which layers a model has is architecture.h's plan, built once at load;
// each layer kind has a file of its own (docs/MODELS.md names them), all
// behind forward.h: none of them shows here.
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
#include "engine/kernels/matvec.h"
#include "engine/kernels/vq.h"
#include "engine/memory/region.h"
#include "engine/model/trunk.h"

namespace waste {

class ForwardPass;  // engine/model/forward.h

// One conversation's state: what the model remembers between tokens.
struct Session {
  int position = 0;     // tokens seen
  int max_context = 0;  // capacity of the per-position caches
  // Per layer, views into `memory`, as the layer's attention kind lays them
  // out (each kind's file says its shapes); empty where the kind keeps none.
  // A recurrent kind's state, and the ring of its short convolutions' last
  // inputs, oldest first.
  std::vector<std::span<float>> state;
  std::vector<std::span<float>> ring;
  // A caching kind's rows, one per position: [max_context][row floats].
  std::vector<std::span<float>> cache;
  // The same shapes as state and ring: where a chunk computes the new
  // recurrent state, begun from a copy of the old at the chunk's first
  // token, and swapped in (the spans exchanged) only when the chunk is done.
  // So a Forward that fails leaves every committed state as it was (cache
  // rows past `position` may have been written; they are overwritten).
  std::vector<std::span<float>> state_spare, ring_spare;
  // Owns all of the above: zeroed, faulted in as it is first written (the
  // caches one position at a time), on huge pages where allowed. Moving a
  // Session keeps the views valid.
  Region memory;

  uint64_t state_bytes() const;
};

// A session's committed state copied out (recurrent states, rings, the cache
// rows below `position`), for resuming a conversation later: the prefix
// cache of `waste serve`.
struct SessionSnapshot {
  int position = 0;
  std::vector<float> floats;  // every layer's committed state, layer after layer
  uint64_t bytes() const { return floats.size() * sizeof(float); }
};
SessionSnapshot TakeSnapshot(const Session& s);
// Puts `snap` into `to`, a session of the model it was taken from (the
// sizes are checked) with room for its position; `to`'s old state is gone.
// Running tokens on `to` then gives the logits the snapshotted session would have.
Status RestoreSnapshot(const SessionSnapshot& snap, Session& to);

// Time spent per phase of the forward pass, for `waste bench`.
struct PhaseTimes {
  double attention = 0, experts = 0, expert_wait = 0, other = 0;
  double lookahead = 0;  // the lookahead's router matvecs and ranking
};

// The roofline's parts of a forward pass (docs/log/2026-12-02.md and 2026-12-05.md, "roofline"):
// finer than PhaseTimes, each with the weight bytes it read. A part that
// names products is the time of its trunk products alone (the layers'
// LayerContext::MatVecs and its kin, engine/model/layer.h);
// the tables, the routed experts and the head are timed where they run.
// Seconds are the calling thread's wall time, except the parts run on the
// pool's threads side by side inside PhaseTimes::experts (kRoutedExperts,
// kDownTables, kSharedExperts), whose seconds are summed over the threads.
enum class StepPart : int {
  kAttentionProducts,  // the attention layers' trunk products (the rest of PhaseTimes::attention
                       // is their recurrences, softmax, rotary and norms)
  kRouter,             // the routers' products
  kLookahead,          // the lookahead's router products (in PhaseTimes::lookahead)
  kGateUpTables,       // the lookup tables of the routed experts' input
  kLatentProducts,     // K3's latent down- and up-projections around the routed experts
  kRoutedExperts,      // applying routed expert records, down's tables included (thread-seconds)
  kDownTables,         // of which building down's tables from each expert's activation
  kSharedExperts,      // the shared experts' products (thread-seconds)
  kDenseMlp,           // dense layers' feed-forward products
  kHead,               // the final norm and the LM head
  kCount
};
const char* StepPartName(StepPart p);  // "attention_products", ...
struct StepParts {
  static constexpr int kCount = static_cast<int>(StepPart::kCount);
  double seconds[kCount] = {};
  // Bytes of weights read: each trunk matrix once per product, an expert
  // record once per token it is applied to. Lookup tables, states and
  // activations (cache-sized, rebuilt per token) are not counted.
  uint64_t bytes[kCount] = {};
};

// Parallel jobs the pool has run since load (kernels::ThreadPool::jobs():
// each is a barrier, where the caller waits for the slowest chunk), in all
// and in attention. Counts, not times: the same on a busy machine.
struct PoolJobs {
  uint64_t attention = 0, total = 0;
};

// How well the router lookahead guessed, counted in distinct (layer, expert)
// records per chunk: precision is used / hinted, recall used / demanded.
struct LookaheadStats {
  uint64_t hinted = 0;    // records hinted as HintKind::kLookahead
  uint64_t used = 0;      // of those, demanded by the layer they were hinted for, in that chunk
  uint64_t demanded = 0;  // records demanded by layers that had been sent a lookahead hint
};

struct ModelOptions {
  int threads = 0;  // 0: every CPU this process may use
  kernels::Isa isa = kernels::BestIsa();
  // The routed experts' lookup table: kF32 is exact (the reference fixtures
  // hold to 1e-4 of the largest logit); kI8 is its int8 copy, several times
  // faster with AVX-512 and off by the table's rounding (engine/kernels/vq.h;
  // its logit error and KL are in docs/log/2026-11-30-issues-6-to-9.md,
  // "accuracy of the int8 table").
  kernels::VqTable expert_table = kernels::VqTable::kF32;
  // How AVX-512's Q4G products (a 4-bit trunk, Q4GR experts, a 4-bit head)
  // put their inputs in fixed point: kExact by default; kInt8 is faster and
  // not exact (kernels/matvec.h; its perplexity and KL in
  // docs/log/2026-12-03-to-04.md, "int8 inputs").
  kernels::Q4Input q4_input = kernels::Q4Input::kExact;
  int chunk = 32;     // prefill tokens per chunk (the programs plan theirs: engine/plan/plan.h)
  int prefetch = 16;  // expert records asked for ahead of their use within a layer
  // Router lookahead: once a layer's attention is done, the next layer's
  // router (when it is a MoE layer) is run on the hidden state and each
  // token's `lookahead` best experts are hinted as HintKind::kLookahead, so
  // their reads overlap this layer's experts. A chunk hints the union of
  // its tokens' guesses, the most voted first, at most `prefetch` of them.
  // 0 turns it off. The real router still decides, so the logits do not
  // depend on it. 6, measured on kl48b at 2 GiB against 0, 4, 8 and 16: 6
  // and 8 cut the expert I/O wait by a third, and 6 reads 11% more bytes
  // than off where 8 reads 55% more; 16 reads 3.3 times the bytes and waits
  // 2.8 times as long (docs/log/2026-11-30-issues-3-to-5.md, "router lookahead").
  int lookahead = 6;
  // Also guess the next token's first MoE layer from this token's final
  // hidden state. Off: on kl48b it was right 32% of the time, no better than
  // the previous token's own experts (32%, already cached), and 8% on the
  // records that token had not used (chance: 3%). See docs/log/2026-11-30-issues-3-to-5.md.
  bool lookahead_next_token = false;
  // Route this many experts per token instead of the trained top_k: the
  // first N of the router's own ranking, weighted as the family's router
  // weighs its choice (renormalised over the N where it renormalises, the
  // softmax over the N for GPT-OSS's). 1..top_k, anything else refused at
  // load; 0: top_k, the default path, bit for bit. Fewer expert reads and
  // products per token, at a cost in quality the model does not announce
  // (docs/log/2026-12-02.md, "fewer experts per token"). The lookahead's count is
  // its own (above).
  int experts_per_token = 0;
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

  const ModelConfig& config() const;
  const Container& container() const;
  int threads() const;
  // Experts guessed per token by the lookahead: options.lookahead, but no
  // more than the router can choose from; 0 when off.
  int lookahead() const;

  // A fresh conversation of up to `max_context` tokens. Its memory is
  // reserved, not touched: pages are faulted in as the state is used. Throws
  // std::bad_alloc when the address space is exhausted, as a vector would.
  Session NewSession(int max_context) const;

  // Runs `tokens` at the session's position, in chunks of options.chunk.
  // `logits` receives the last token's logits ([vocab]) when non-null;
  // `all_logits` every token's ([tokens][vocab]) when non-null. A chunk
  // that fails (e.g. its experts could not be had) leaves the session as it
  // was before that chunk: the chunks before it stay run (s.position says
  // how far), and running the rest again gives the logits an uninterrupted
  // Forward would have given.
  Status Forward(Session& s, std::span<const int> tokens, float* logits,
                 std::vector<float>* all_logits = nullptr);

  // One sequence's share of a batched step: `tokens` (at least one) run at
  // session->position; `logits` receives the last one's logits ([vocab]).
  struct BatchItem {
    Session* session;
    std::span<const int> tokens;
    float* logits;
  };
  // Runs every item's tokens in one step, as one chunk: attention per
  // sequence, and each MoE layer acquires the distinct experts of all the
  // items' tokens once. Each item's logits are those Forward would give its
  // session alone, bit for bit. The step is not split: the caller bounds its
  // size (options.chunk is Forward's). All or nothing: a step that fails
  // leaves every session as it was. The sessions must be distinct.
  Status ForwardBatch(std::span<const BatchItem> items);

  const PhaseTimes& times() const;
  StepParts step_parts() const;
  PoolJobs pool_jobs() const;
  // Since load: the next-layer lookahead's counts, and the next-token guess's
  // (non-zero only with options.lookahead_next_token).
  const LookaheadStats& lookahead_stats() const;
  const LookaheadStats& next_token_stats() const;
  // Attention constants, for tests against a reference.
  std::span<const float> rope_inv_freq() const;
  float softmax_scale() const;

 private:
  explicit Model(std::unique_ptr<ForwardPass> pass);
  // Refuses an empty run and ids outside the vocabulary.
  Status CheckTokens(std::span<const int> tokens) const;

  // The layers and what they share (forward.h): no layer kind shows here.
  std::unique_ptr<ForwardPass> pass_;
};

}  // namespace waste
