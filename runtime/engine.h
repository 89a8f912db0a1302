// The engine a compute program runs: a container opened with its expert
// cache (in this process, or wasted's through link/), its model and
// tokenizer under a memory budget; and the forward pass and batch step
// that outlive a restart of wasted. Notices (no daemon listening, waiting
// for one to come back, attached again) are written to stderr.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "engine/experts/cache.h"
#include "engine/format/container.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "link/attach.h"
#include "runtime/stepper.h"

namespace waste {

struct EngineOptions {
  std::string container;
  std::string budget;  // empty: this machine's default
  int threads = 0;     // 0: all usable CPUs
  int context = 4096;
  // Prefill tokens per chunk; 0: PlanChunk's (engine/plan/plan.h: 32 when
  // every expert fits in the cache, else as long as its memory plan allows).
  int chunk = 0;
  int readers = 4;
  // Experts hinted per token for the next MoE layer (ModelOptions::lookahead).
  int lookahead = ModelOptions{}.lookahead;
  // Experts routed per token (ModelOptions::experts_per_token); 0: top_k.
  int experts_per_token = 0;
  bool verify = false;  // crc32 of every record read
  std::string isa;      // scalar, avx2, avx512, amx; empty: the best available
  std::string expert_table = "f32";  // f32 or i8 (ModelOptions::expert_table)
  std::string q4_input = "exact";    // exact or i8 (ModelOptions::q4_input)
  // A chat family's preset (ChatFormatOfFamily) in place of the container's
  // chat.json; empty: chat.json's.
  std::string chat_format;
  std::function<void(int, int, std::span<const int>)> on_route;  // routing trace sink
  // Where the experts come from: wasted at `socket` when one listens there;
  // otherwise this process, after a notice, unless `spawn` starts a daemon.
  // `local` skips the daemon altogether.
  std::string socket;
  bool local = false;
  bool spawn = false;
  double spawn_idle_exit = 300;  // seconds a spawned daemon lingers without clients
  // How long ForwardThroughRestarts waits for wasted to come back; 0: not at all.
  double reattach_wait = kDefaultReattachWait;
};

struct Engine final : Stepper {
  std::unique_ptr<Container> container;
  // The experts come from one of these: wasted, or a cache in this process.
  std::unique_ptr<DaemonLink> daemon;
  std::unique_ptr<ExpertCache> cache;
  ExpertSource* experts = nullptr;  // whichever it is; null for a dense model
  // Null after wasted went away and no daemon could be attached again
  // (ForwardThroughRestarts); `lost` says why.
  std::unique_ptr<Model> model;
  ModelOptions model_options;  // what `model` was built with, to build it again
  std::string lost;
  std::optional<Tokenizer> tokenizer;  // when the container has one
  // The conversation's layout: chat.json's, or the preset --chat-format
  // named (EngineOptions::chat_format); none without either.
  std::optional<ChatFormat> chat;
  uint64_t budget = 0;       // this process's: with a daemon, state and scratch only
  // Of it, the prefill chunk's work memory (model_options.chunk tokens of
  // ChunkBytesPerToken), beyond the one-token scratch PlanMemory counts.
  uint64_t chunk_scratch = 0;
  uint64_t cache_slots = 0;  // the cache's, in this process or the daemon
  std::string where;         // "in process" or "wasted at SOCKET"
  EngineOptions options;     // what it was opened with: the socket and wait to reattach

  // StepThroughRestarts.
  Status Step(std::span<const Model::BatchItem> items) override;
  // model->NewSession, attaching again first when the model is gone.
  Result<Session> NewSession(int max_context) override;
  bool attached() const override { return model != nullptr; }
  // Through wasted's prompt states (daemon/prompt_states.h) when attached to
  // one; a state refused (damaged, another model's) is said on stderr and
  // the prompt is run instead.
  int FindSharedState(std::span<const int> tokens, int longer_than, Session& to,
                      std::span<float> logits) override;
  void PublishSharedState(std::span<const int> tokens, const Session& s,
                          std::span<const float> logits) override;
  bool share_refusal_said = false;  // a publish refused is said once, not every prompt
};

// Opens everything: the container, the experts (wasted's when one serves
// at o.socket, else a cache in this process sized by o.budget), the model
// and the tokenizer.
Result<Engine> OpenEngine(const EngineOptions& o);

// e.model->Forward(s, tokens, logits), outliving wasted: attached to a
// daemon (and with reattach_wait > 0; with 0 a daemon already gone fails
// the call at once, one going in it fails it), when it has gone away, before the
// call or in it, the model and the link are dropped (their memory was the
// old daemon's), a daemon serving the same container at the socket is waited
// for (ReattachDaemon, notices on stderr), the model is built again over it,
// and the tokens the session has not run yet are run from where the session
// was (Model::Forward leaves a failed chunk unrun), so the logits are an
// uninterrupted run's. Fails when none serves within the wait, or one
// serves another container: `s` then holds every token run so far, e.model
// is null, and the next call tries again. The socket and the wait are
// e.options'.
Status ForwardThroughRestarts(Engine& e, Session& s, std::span<const int> tokens, float* logits);

// e.model->ForwardBatch(items), outliving wasted in the same way: a failed
// step moves no session, so after reattaching it runs again whole.
Status StepThroughRestarts(Engine& e, std::span<const Model::BatchItem> items);

}  // namespace waste
