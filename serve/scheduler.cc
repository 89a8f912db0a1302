#include "serve/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace waste::serve {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct Scheduler::Running {
  std::shared_ptr<Generation> g;
  double submitted = 0;
  uint64_t number = 0;  // PrefillProgress::request
  Session session;
  std::shared_ptr<Group> group;  // null: alone
  bool waiting = false;          // for its group's prompt state: not stepped
  std::vector<int> history;      // the tokens the session has run
  std::vector<int> pending;      // to run next: the rest of the prompt, or the last sampled token
  bool prefilling = true;
  std::vector<float> logits;  // [vocab]: after the last of `history`
  std::vector<float> masked;  // [vocab]: `logits` under the generation's constraint
  Sampler sampler;
  GenerationEnd end;
  Running(std::shared_ptr<Generation> gen, double t, Session s)
      : g(std::move(gen)), submitted(t), session(std::move(s)), sampler(g->sampling) {}
};

Scheduler::Scheduler(const SchedulerOptions& o, int vocab, Stepper& model)
    : o_(o), vocab_(vocab), model_(model), attached_(model.attached()) {
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() {
  Stop();
}

bool Scheduler::Submit(std::shared_ptr<Generation> g) {
  std::vector<std::shared_ptr<Generation>> one;
  one.push_back(std::move(g));
  return SubmitGroup(std::move(one));
}

size_t Scheduler::capacity() const {
  return static_cast<size_t>(std::max(1, o_.parallel)) + static_cast<size_t>(std::max(0, o_.queue));
}

bool Scheduler::SubmitGroup(std::vector<std::shared_ptr<Generation>> gs) {
  std::lock_guard<std::mutex> lock(mu_);
  // Room: the queue's, and the places in the batch not yet taken.
  const size_t taken = std::min<size_t>(running_count_, std::max(1, o_.parallel));
  if (stopping_ || queue_.size() + taken + gs.size() > capacity()) return false;
  auto group = gs.size() > 1 ? std::make_shared<Group>() : nullptr;
  const double now = Now();
  for (auto& g : gs) queue_.push_back({std::move(g), now, group});
  wake_.notify_one();
  return true;
}

void Scheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.queued = queue_.size();
    s.prefilling = prefilling_;
  }
  s.running = running_count_;
  s.steps = steps_;
  s.prompt_tokens = prompt_tokens_;
  s.reused_tokens = reused_tokens_;
  s.completion_tokens = completion_tokens_;
  s.kept_states = kept_count_;
  s.kept_bytes = kept_bytes_count_;
  s.shared_found = shared_found_;
  s.shared_published = shared_published_;
  return s;
}

void Scheduler::Loop() {
  for (;;) {
    std::vector<Queued> admitted;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !running_.empty() || !queue_.empty(); });
      if (stopping_) {
        for (const Queued& q : queue_) {
          GenerationEnd end;
          end.reason = EndReason::kCancelled;
          end.prompt_tokens = static_cast<int>(q.g->prompt.size());
          if (q.g->on_end) q.g->on_end(end);
        }
        queue_.clear();
        break;
      }
      while (running_.size() + admitted.size() < static_cast<size_t>(std::max(1, o_.parallel)) &&
             !queue_.empty()) {
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      running_count_ = running_.size() + admitted.size();  // Submit counts them as taken
    }
    for (Queued& q : admitted)
      if (auto r = Admit(std::move(q))) running_.push_back(std::move(r));
    running_count_ = running_.size();
    PublishProgress();  // the admitted ones during their first step
    if (!running_.empty()) Step();
    PublishProgress();
  }
  for (auto& r : running_) End(*r, EndReason::kCancelled);
  running_.clear();
  running_count_ = 0;
  PublishProgress();
}

void Scheduler::PublishProgress() {
  std::vector<PrefillProgress> now;
  for (const auto& r : running_)
    if (r->g && r->prefilling)
      now.push_back({r->number, static_cast<int>(r->history.size()),
                     static_cast<int>(r->g->prompt.size())});
  std::lock_guard<std::mutex> lock(mu_);
  prefilling_ = std::move(now);
}

std::unique_ptr<Scheduler::Running> Scheduler::Admit(Queued q) {
  const std::shared_ptr<Generation>& g = q.g;
  GenerationEnd refused;
  refused.prompt_tokens = static_cast<int>(g->prompt.size());
  refused.reason = EndReason::kError;
  if (g->prompt.empty())
    refused.error = "the prompt has no tokens";
  else if (static_cast<int>(g->prompt.size()) >= o_.context)
    refused.error = "the prompt's " + std::to_string(g->prompt.size()) +
                    " tokens leave no room in a context of " + std::to_string(o_.context);
  else if (g->cancelled)
    refused.reason = EndReason::kCancelled;
  if (!refused.error.empty() || refused.reason == EndReason::kCancelled) {
    if (g->on_end) g->on_end(refused);
    return nullptr;
  }
  // After wasted went away for good in a step, this attaches again first.
  auto session = model_.NewSession(o_.context);
  attached_ = model_.attached();
  if (!session.ok()) {
    refused.error = session.status().message();
    if (g->on_end) g->on_end(refused);
    return nullptr;
  }
  auto r = std::make_unique<Running>(g, q.submitted, std::move(*session));
  r->number = ++admitted_;
  r->group = std::move(q.group);
  r->end.prompt_tokens = static_cast<int>(g->prompt.size());
  prompt_tokens_ += g->prompt.size();
  r->logits.assign(vocab_, 0.f);
  r->waiting = r->group != nullptr;
  if (r->waiting)
    TryStart(*r);
  else
    ResumeKept(*r);
  return r;
}

void Scheduler::ResumeKept(Running& r) {
  const std::vector<int>& prompt = r.g->prompt;
  auto best = kept_.end();
  for (auto it = kept_.begin(); it != kept_.end(); ++it)
    if (it->tokens.size() <= prompt.size() &&
        (best == kept_.end() || it->tokens.size() > best->tokens.size()) &&
        std::equal(it->tokens.begin(), it->tokens.end(), prompt.begin()))
      best = it;
  if (best != kept_.end() && RestoreSnapshot(best->state, r.session).ok()) {
    r.history = best->tokens;
    r.logits = best->logits;
    r.end.reused_tokens = static_cast<int>(best->tokens.size());
    reused_tokens_ += best->tokens.size();
    kept_.splice(kept_.begin(), kept_, best);  // most recently used
  }
  const int have = static_cast<int>(r.history.size());
  if (static_cast<int>(prompt.size()) - have >= o_.share_min_tokens) {
    const int n = model_.FindSharedState(prompt, have, r.session, r.logits);
    if (n > have) {
      r.history.assign(prompt.begin(), prompt.begin() + n);
      r.end.reused_tokens = n;
      reused_tokens_ += static_cast<uint64_t>(n - have);
      ++shared_found_;
    }
  }
  r.pending.assign(prompt.begin() + static_cast<long>(r.history.size()), prompt.end());
}

bool Scheduler::TryStart(Running& r) {
  Group& group = *r.group;
  if (group.prompt && group.prompt->tokens == r.g->prompt &&
      RestoreSnapshot(group.prompt->state, r.session).ok()) {
    r.history = group.prompt->tokens;
    r.logits = group.prompt->logits;
    r.pending.clear();
    r.end.reused_tokens = static_cast<int>(r.history.size());
    reused_tokens_ += r.history.size();
  } else if (group.prompt || !group.prefiller) {
    // Nobody runs the prompt (or its state does not fit this one): run it.
    if (!group.prompt) group.prefiller = &r;
    ResumeKept(r);
  } else {
    return false;
  }
  r.waiting = false;
  return true;
}

void Scheduler::PromptDone(Running& r) {
  r.prefilling = false;
  if (!r.group || r.group->prompt) return;
  r.group->prompt = Kept{r.history, TakeSnapshot(r.session), r.logits};
  r.group->prefiller = nullptr;
}

void Scheduler::Step() {
  // Cancelled ones end first; a group's waiting ones start if they can; a
  // prompt resumed whole samples at once.
  for (auto& r : running_) {
    if (!r->g) continue;
    if (r->g->cancelled) {
      End(*r, EndReason::kCancelled);
      continue;
    }
    if (r->waiting && !TryStart(*r)) continue;
    if (r->prefilling && r->pending.empty()) {
      PromptDone(*r);
      if (!Emit(*r)) End(*r, r->end.reason, r->end.error);
    }
  }
  std::erase_if(running_, [](const auto& r) { return !r->g; });
  running_count_ = running_.size();
  if (running_.empty()) return;
  std::vector<Model::BatchItem> items;
  std::vector<Running*> in_step;
  std::vector<size_t> taken;
  int prompt_budget = std::max(1, o_.chunk);
  for (auto& r : running_) {
    if (r->waiting) continue;
    size_t n = 1;
    if (r->prefilling) {
      if (prompt_budget == 0) continue;
      n = std::min(r->pending.size(), static_cast<size_t>(prompt_budget));
      prompt_budget -= static_cast<int>(n);
    }
    items.push_back({&r->session, std::span<const int>(r->pending).first(n), r->logits.data()});
    in_step.push_back(r.get());
    taken.push_back(n);
  }
  const Status st = model_.Step(items);
  attached_ = model_.attached();
  ++steps_;
  for (size_t i = 0; i < in_step.size(); ++i) {
    Running& r = *in_step[i];
    if (!st.ok()) {
      End(r, EndReason::kError, st.message());
      continue;
    }
    r.history.insert(r.history.end(), r.pending.begin(),
                     r.pending.begin() + static_cast<long>(taken[i]));
    r.pending.erase(r.pending.begin(), r.pending.begin() + static_cast<long>(taken[i]));
    if (!r.pending.empty()) continue;
    if (r.prefilling) {
      PromptDone(r);
      Keep(r.history, r.session, r.logits);  // the turn's boundary
      if (static_cast<int>(r.history.size()) >= o_.share_min_tokens) {
        model_.PublishSharedState(r.history, r.session, r.logits);
        ++shared_published_;
      }
    }
    if (!Emit(r)) End(r, r.end.reason, r.end.error);
  }
  std::erase_if(running_, [](const auto& r) { return !r->g; });
  running_count_ = running_.size();
}

bool Scheduler::Emit(Running& r) {
  Generation& g = *r.g;
  if (g.cancelled) {  // during the step: its client is gone, nothing more to pass on
    r.end.reason = EndReason::kCancelled;
    return false;
  }
  if (r.end.completion_tokens >= g.max_tokens) {
    r.end.reason = EndReason::kLength;
    return false;
  }
  const int token = g.constraint ? SampleConstrained(r) : r.sampler.Sample(r.logits);
  if (token < 0) return false;
  if (std::find(g.end_tokens.begin(), g.end_tokens.end(), token) != g.end_tokens.end()) {
    r.end.reason = EndReason::kStop;
    return false;
  }
  if (g.constraint && !g.constraint->Accept(token)) {
    r.end.reason = EndReason::kError;
    r.end.error = "the constraint refused a token it allowed";
    return false;
  }
  if (r.end.completion_tokens == 0) r.end.first_token_seconds = Now() - r.submitted;
  ++r.end.completion_tokens;
  ++completion_tokens_;
  const bool more = !g.on_token || g.on_token(token, r.logits);
  if (!more || (g.constraint && g.constraint->finished())) {
    r.end.reason = EndReason::kStop;
    return false;
  }
  if (r.end.completion_tokens >= g.max_tokens) {
    r.end.reason = EndReason::kLength;
    return false;
  }
  if (static_cast<int>(r.history.size()) + 1 >= o_.context) {
    r.end.reason = EndReason::kLength;
    return false;
  }
  r.pending = {token};
  return true;
}

int Scheduler::SampleConstrained(Running& r) {
  Generation& g = *r.g;
  r.masked = r.logits;
  size_t allowed = g.constraint->Mask(r.masked);
  if (g.constraint->complete())
    for (int e : g.end_tokens)
      if (e >= 0 && static_cast<size_t>(e) < r.masked.size())
        r.masked[static_cast<size_t>(e)] = r.logits[static_cast<size_t>(e)], ++allowed;
  if (allowed == 0) {  // complete, and no end token to sample: the reply is whole
    r.end.reason = g.constraint->complete() ? EndReason::kStop : EndReason::kError;
    if (!g.constraint->complete()) r.end.error = "the constraint allows no next token";
    return -1;
  }
  int token = r.sampler.Sample(r.masked);
  // The sampler's last resort, after rounding, may land on a masked token.
  if (r.masked[static_cast<size_t>(token)] == -INFINITY)
    token = static_cast<int>(std::max_element(r.masked.begin(), r.masked.end()) - r.masked.begin());
  return token;
}

void Scheduler::End(Running& r, EndReason why, std::string error) {
  r.end.reason = why;
  r.end.error = std::move(error);
  if (r.group && r.group->prefiller == &r) r.group->prefiller = nullptr;  // another takes it on
  // A reply that ran to its end is a turn's boundary too.
  if (why != EndReason::kError && !r.prefilling && !r.history.empty())
    Keep(r.history, r.session, r.logits);
  if (r.g->on_end) r.g->on_end(r.end);
  r.g.reset();
}

void Scheduler::Keep(const std::vector<int>& tokens, const Session& s,
                     std::span<const float> logits) {
  if (o_.prefix_cache_bytes == 0) return;
  for (auto it = kept_.begin(); it != kept_.end(); ++it)
    if (it->tokens == tokens) {
      kept_.splice(kept_.begin(), kept_, it);
      return;
    }
  Kept k{tokens, TakeSnapshot(s), {logits.begin(), logits.end()}};
  auto size = [](const Kept& e) {
    return e.state.bytes() + (e.logits.size() + e.tokens.size()) * 4;
  };
  if (size(k) > o_.prefix_cache_bytes) return;
  kept_bytes_ += size(k);
  kept_.push_front(std::move(k));
  while (kept_bytes_ > o_.prefix_cache_bytes) {
    kept_bytes_ -= size(kept_.back());
    kept_.pop_back();
  }
  kept_count_ = kept_.size();
  kept_bytes_count_ = kept_bytes_;
}

}  // namespace waste::serve
