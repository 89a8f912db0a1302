// The decode loop of `waste serve`: several conversations in one forward step.
//
// A Scheduler owns a thread that runs up to `parallel` generations together:
// each step is one Stepper::Step (the Engine's Model::ForwardBatch, through
// a restart of wasted) of every running generation's next tokens (a
// decoding one's last sampled token; a prefilling one's next part of its
// prompt, at most `chunk` prompt tokens a step in all), so each MoE
// layer acquires the distinct experts of all of them once. A new request's
// prompt joins the running batch between steps. Requests wait in a bounded
// queue for a free place.
//
// Conversations are not prefilled twice: at the end of every prompt and of
// every reply the session's state is kept (a SessionSnapshot with the logits
// there, the least recently used dropped past `prefix_cache_bytes`), and a
// request whose prompt begins with a kept state's tokens starts from the
// longest such. The logits are those of a full prefill, bit for bit
// (Model::Forward's are the same whatever the chunking).
//
// Beyond this process: a prompt whose kept states leave at least
// `share_min_tokens` of it to run asks the Stepper for a shared state
// (wasted's prompt states, Stepper::FindSharedState) longer than the kept
// one, and a prompt of at least that many tokens that ran here is published
// at its end (PublishSharedState), so another process, or this one after a
// restart, starts from it. A publish copies the state on the scheduler's
// thread: the batch waits for it.
//
// Generations of one prompt submitted together (SubmitGroup: OpenAI's n)
// prefill it once, whatever is kept: the first admitted runs it, the others
// wait in their places and start from a copy of its state there (a
// SessionSnapshot and the logits, held while any of them runs, apart from
// the kept states' budget), each then sampling on its own. Should the one
// prefilling end first, the next takes its place.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/grammar/token_mask.h"
#include "engine/model/model.h"
#include "engine/model/sampler.h"
#include "runtime/stepper.h"

namespace waste::serve {

enum class EndReason {
  kStop,       // an end token was sampled, or on_token asked to stop
  kLength,     // max_tokens generated, or the context is full
  kCancelled,  // Generation::cancelled was set, or the scheduler stopped
  kError,      // the forward pass failed (GenerationEnd::error says why)
};

struct GenerationEnd {
  EndReason reason = EndReason::kStop;
  std::string error;
  int prompt_tokens = 0;
  int completion_tokens = 0;       // tokens passed to on_token
  int reused_tokens = 0;           // prompt tokens taken from a kept state, not run again
  double first_token_seconds = 0;  // from Submit to the first on_token; 0 if none
};

// One request. Every callback runs on the scheduler's thread, and must not
// call back into the Scheduler.
struct Generation {
  std::vector<int> prompt;  // at least one token
  int max_tokens = 256;
  SamplerOptions sampling;
  std::vector<int> end_tokens;  // sampling one of these ends the reply; it is not passed on
  // Optional (response_format, tool calls): the tokens it does not allow are
  // never sampled, end_tokens only once it is complete, and the reply ends
  // (kStop) when it is finished; on_token still gets the model's own logits
  // (logprobs are unchanged). One that allows nothing while incomplete ends
  // the reply with kError.
  std::unique_ptr<grammar::TokenConstraint> constraint;
  // Each generated token with the logits it was sampled from ([vocab]).
  // Returning false ends the reply after it (EndReason::kStop).
  std::function<bool(int token, std::span<const float> logits)> on_token;
  // Called exactly once for every generation Submit accepted.
  std::function<void(const GenerationEnd&)> on_end;
  // Set from any thread (a client went away): the generation ends within a step.
  std::atomic<bool> cancelled{false};
};

struct SchedulerOptions {
  int parallel = 4;    // generations in one step
  int queue = 16;      // waiting for a place, past those free; Submit refuses more
  int context = 4096;  // tokens a conversation may hold, prompt and reply
  int chunk = 32;      // prompt tokens run in one step, over all generations
  uint64_t prefix_cache_bytes = 1ull << 30;  // kept states, snapshots and logits
  // Prompts shorter than this are not published, nor looked up beyond the
  // kept states (runtime/stepper.h).
  int share_min_tokens = kShareMinTokens;
};

// A request in prefill: its number (1, 2, ... in order of admission) and
// its prompt's tokens done (run, or taken from a kept or shared state) out
// of all of them. As of the last step's end: a step runs at most `chunk`.
struct PrefillProgress {
  uint64_t request = 0;
  int done = 0, total = 0;
};

struct SchedulerStats {
  uint64_t queued = 0, running = 0;
  std::vector<PrefillProgress> prefilling;  // in order of admission
  uint64_t steps = 0, prompt_tokens = 0, reused_tokens = 0, completion_tokens = 0;
  uint64_t shared_found = 0, shared_published = 0;  // prompt states from and to the Stepper
  uint64_t kept_states = 0, kept_bytes = 0;
};

class Scheduler {
 public:
  // Steps `model` (an Engine, which reattaches to a restarted daemon), which
  // must outlive the scheduler; only the scheduler's thread calls it.
  Scheduler(const SchedulerOptions& o, int vocab, Stepper& model);
  ~Scheduler();  // Stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues `g` and returns true, or returns false when the queue is full or
  // the scheduler has stopped (nothing of `g` is called then).
  bool Submit(std::shared_ptr<Generation> g);
  // Queues `gs`, generations of one prompt, all or none: false when the queue
  // cannot take them all or the scheduler has stopped (nothing of any is
  // called then). The prompt is prefilled once for them all.
  bool SubmitGroup(std::vector<std::shared_ptr<Generation>> gs);
  // Ends every generation, queued or running (kCancelled), and joins the thread.
  void Stop();
  SchedulerStats stats() const;
  // model.attached() after the last step, read from any thread (/health).
  bool attached() const { return attached_; }
  const SchedulerOptions& options() const { return o_; }
  // The most generations it holds at once, in the batch and queued: a group
  // larger than this is never taken.
  size_t capacity() const;
  int vocab() const { return vocab_; }  // the logits' length

 private:
  struct Running;
  struct Kept {
    std::vector<int> tokens;  // what the state has seen
    SessionSnapshot state;
    std::vector<float> logits;  // [vocab]: after the last of `tokens`
  };
  // Beyond this process: a prompt whose kept states leave at least
// `share_min_tokens` of it to run asks the Stepper for a shared state
// (wasted's prompt states, Stepper::FindSharedState) longer than the kept
// one, and a prompt of at least that many tokens that ran here is published
// at its end (PublishSharedState), so another process, or this one after a
// restart, starts from it. A publish copies the state on the scheduler's
// thread: the batch waits for it.
//
// Generations of one prompt submitted together.
  struct Group {
    std::optional<Kept> prompt;          // the state at the prompt's end, once one has run it
    const Running* prefiller = nullptr;  // the one running the prompt now; null: none
  };
  struct Queued {
    std::shared_ptr<Generation> g;
    double submitted = 0;
    std::shared_ptr<Group> group;  // null: alone
  };
  void Loop();
  // Starts q's generation: its session from the longest kept prefix of its
  // prompt, or, in a group, from the group's prompt state (ready or awaited).
  std::unique_ptr<Running> Admit(Queued q);
  // r's prompt resumed from the longest kept state that begins it, the rest pending.
  void ResumeKept(Running& r);
  // A group's member waiting for its prompt: from the group's state once
  // there is one, or running the prompt itself once none of them is. False:
  // it waits on.
  bool TryStart(Running& r);
  // r's prompt has run: a group's first to get there hands its state over.
  void PromptDone(Running& r);
  // One step of every running generation; ends those that are done.
  void Step();
  // Samples r's next token from r.logits and passes it on; false when r is done.
  bool Emit(Running& r);
  // r's next token under its constraint, or -1 when none may come (r.end says why).
  int SampleConstrained(Running& r);
  void End(Running& r, EndReason why, std::string error = {});
  // prefilling_ from running_, for stats() on other threads.
  void PublishProgress();
  void Keep(const std::vector<int>& tokens, const Session& s, std::span<const float> logits);

  const SchedulerOptions o_;
  const int vocab_;
  Stepper& model_;
  std::atomic<bool> attached_;

  mutable std::mutex mu_;  // guards queue_, stopping_, prefilling_
  std::condition_variable wake_;
  std::deque<Queued> queue_;
  bool stopping_ = false;
  std::vector<PrefillProgress> prefilling_;

  // The scheduler thread's own.
  std::vector<std::unique_ptr<Running>> running_;
  uint64_t admitted_ = 0;  // requests admitted so far: the next one's number - 1
  std::list<Kept> kept_;  // most recently used first
  uint64_t kept_bytes_ = 0;

  std::atomic<uint64_t> steps_{0}, prompt_tokens_{0}, reused_tokens_{0}, completion_tokens_{0},
      running_count_{0}, kept_count_{0}, kept_bytes_count_{0}, shared_found_{0},
      shared_published_{0};
  std::thread thread_;
};

}  // namespace waste::serve
