// serve::Scheduler on the synthetic presets: a greedy reply is the same
// alone or batched beside others (and equals Model::Forward's own greedy
// run), a follow-up turn resumes from the kept state with the logits of a
// full prefill, end tokens, cancelling, a full queue, a prompt too long,
// stopping with work in hand, a model gone for good, and generations of one
// prompt submitted together prefilling it once.
#include "serve/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>

#include "engine/model/session_io.h"
#include "tests/support/tiny_engine.h"
#include "tests/test_util.h"

namespace waste::serve {
namespace {

// What one generation produced, filled in on the scheduler's thread.
struct Outcome {
  std::mutex mu;
  std::vector<int> tokens;
  std::vector<std::vector<float>> logits;
  GenerationEnd end;
  std::promise<void> done;
};

std::shared_ptr<Generation> Greedy(std::vector<int> prompt, int max_tokens,
                                   std::shared_ptr<Outcome> out) {
  auto g = std::make_shared<Generation>();
  g->prompt = std::move(prompt);
  g->max_tokens = max_tokens;
  g->on_token = [out](int t, std::span<const float> l) {
    std::lock_guard<std::mutex> lock(out->mu);
    out->tokens.push_back(t);
    out->logits.emplace_back(l.begin(), l.end());
    return true;
  };
  g->on_end = [out](const GenerationEnd& e) {
    {
      std::lock_guard<std::mutex> lock(out->mu);
      out->end = e;
    }
    out->done.set_value();
  };
  return g;
}

class SchedulerTest : public ::testing::TestWithParam<const char*> {
 protected:
  using StepFn = std::function<Status(std::span<const Model::BatchItem>)>;

  void SetUp() override {
    waste::testing::TinyEngineOptions o;
    o.model.threads = 2;
    auto e = waste::testing::TinyEngine::Create(GetParam(), waste::testing::ScratchDir(), o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine_ = std::move(*e);
    const int V = engine_->model().config().vocab;
    for (int q = 0; q < 3; ++q) {
      std::vector<int> p;
      for (int i = 0; i < 5 + 4 * q; ++i) p.push_back(static_cast<int>((3 + 37 * i + 101 * q) % V));
      prompts_.push_back(p);
    }
  }

  // Prompt states shared between schedulers, packed as an Engine gives them
  // to wasted: a stand-in for the daemon (daemon_states_test tests its side).
  struct SharedStates {
    std::vector<std::pair<std::vector<int>, std::vector<uint8_t>>> states;
  };

  // The model stepped directly, or through `step` (to hold or fail a step),
  // sharing prompt states through `shared` when given.
  struct ModelStepper : Stepper {
    Model* model = nullptr;
    StepFn step;
    SharedStates* shared = nullptr;
    Status Step(std::span<const Model::BatchItem> items) override {
      return step ? step(items) : model->ForwardBatch(items);
    }
    Result<Session> NewSession(int max_context) override { return model->NewSession(max_context); }
    bool attached() const override { return true; }
    int FindSharedState(std::span<const int> tokens, int longer_than, Session& to,
                        std::span<float> logits) override {
      if (!shared) return 0;
      const std::vector<uint8_t>* best = nullptr;
      size_t n = 0;
      for (const auto& [t, bytes] : shared->states)
        if (t.size() > n && static_cast<int>(t.size()) > longer_than && t.size() <= tokens.size() &&
            std::equal(t.begin(), t.end(), tokens.begin()))
          best = &bytes, n = t.size();
      if (!best) return 0;
      auto st = UnpackPromptState(*best, ModelFingerprint(model->container()), static_cast<int>(n),
                                  static_cast<int>(logits.size()));
      if (!st.ok() || !RestoreSnapshot(st->state, to).ok()) return 0;
      std::copy(st->logits.begin(), st->logits.end(), logits.begin());
      return static_cast<int>(n);
    }
    void PublishSharedState(std::span<const int> tokens, const Session& s,
                            std::span<const float> logits) override {
      if (shared)
        shared->states.push_back({{tokens.begin(), tokens.end()},
                                  PackPromptState(ModelFingerprint(model->container()),
                                                  TakeSnapshot(s), logits)});
    }
  };

  std::unique_ptr<Scheduler> Make(SchedulerOptions o, StepFn step = nullptr,
                                  SharedStates* shared = nullptr) {
    auto& stepper = *steppers_.emplace_back(std::make_unique<ModelStepper>());
    stepper.model = &engine_->model();
    stepper.step = std::move(step);
    stepper.shared = shared;
    return std::make_unique<Scheduler>(o, engine_->model().config().vocab, stepper);
  }

  // Model::Forward's own greedy reply to `prompt`.
  std::vector<int> ForwardGreedy(const std::vector<int>& prompt, int n) {
    Session s = engine_->model().NewSession(64);
    std::vector<float> l(engine_->model().config().vocab);
    std::vector<int> out, next = prompt;
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(engine_->model().Forward(s, next, l.data()).ok());
      out.push_back(static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin()));
      next = {out.back()};
    }
    return out;
  }

  std::unique_ptr<waste::testing::TinyEngine> engine_;
  std::vector<std::vector<int>> prompts_;
  std::vector<std::unique_ptr<ModelStepper>> steppers_;  // outlive their schedulers
};

TEST_P(SchedulerTest, AGreedyReplyIsTheSameAloneOrBesideOthers) {
  SchedulerOptions o;
  o.context = 64;
  o.chunk = 6;  // the prompts take two and three steps, beside the others' decoding
  // The Model is not shared between threads: its own greedy runs come first.
  std::vector<std::vector<int>> forward;
  for (const auto& p : prompts_) forward.push_back(ForwardGreedy(p, 6));
  std::vector<std::vector<int>> alone;
  {
    auto s = Make(o);
    for (const auto& p : prompts_) {
      auto out = std::make_shared<Outcome>();
      ASSERT_TRUE(s->Submit(Greedy(p, 6, out)));
      out->done.get_future().wait();
      EXPECT_EQ(out->end.reason, EndReason::kLength);
      alone.push_back(out->tokens);
    }
  }
  o.prefix_cache_bytes = 0;  // nothing resumed: every prompt runs beside the others
  auto s = Make(o);
  std::vector<std::shared_ptr<Outcome>> outs;
  for (const auto& p : prompts_) {
    outs.push_back(std::make_shared<Outcome>());
    ASSERT_TRUE(s->Submit(Greedy(p, 6, outs.back())));
  }
  for (size_t q = 0; q < outs.size(); ++q) {
    outs[q]->done.get_future().wait();
    EXPECT_EQ(outs[q]->tokens, alone[q]) << "prompt " << q;
    EXPECT_EQ(outs[q]->tokens, forward[q]) << "prompt " << q;
    EXPECT_EQ(outs[q]->end.completion_tokens, 6);
    EXPECT_EQ(outs[q]->end.prompt_tokens, static_cast<int>(prompts_[q].size()));
  }
  // Batched: fewer steps than one after another (5 + 6 * 3 alone at least).
  EXPECT_LT(s->stats().steps, 18u);
}

// Prefill progress (SchedulerStats::prefilling, /metrics's gauges per
// request): during each step of a prompt run `chunk` tokens at a time, its
// tokens done so far out of all of them; a follow-up's start counts the
// tokens taken from the kept state; none once the replies decode or end.
TEST_P(SchedulerTest, PrefillProgressCountsEachPromptsTokensDone) {
  SchedulerOptions o;
  o.context = 64;
  o.chunk = 4;
  Scheduler* sched = nullptr;
  std::vector<std::vector<PrefillProgress>> seen;  // at each step's start
  Model& model = engine_->model();
  auto s = Make(o, [&](std::span<const Model::BatchItem> items) {
    seen.push_back(sched->stats().prefilling);
    return model.ForwardBatch(items);
  });
  sched = s.get();
  const std::vector<int>& prompt = prompts_[2];  // 13 tokens: steps of 4, 4, 4 and 1
  ASSERT_EQ(prompt.size(), 13u);
  auto first = std::make_shared<Outcome>();
  ASSERT_TRUE(s->Submit(Greedy(prompt, 2, first)));
  first->done.get_future().wait();
  ASSERT_EQ(seen.size(), 5u);  // four prompt steps, one decoding
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(seen[i].size(), 1u) << i;
    EXPECT_EQ(seen[i][0].request, 1u);
    EXPECT_EQ(seen[i][0].done, 4 * i);
    EXPECT_EQ(seen[i][0].total, 13);
  }
  EXPECT_TRUE(seen[4].empty());

  // The prompt and more, not the reply: its first 13 tokens from the state
  // kept at the prompt's end.
  std::vector<int> follow = prompt;
  follow.push_back((first->tokens[0] + 1) % model.config().vocab);
  follow.insert(follow.end(), prompts_[1].begin(), prompts_[1].end());
  seen.clear();
  auto second = std::make_shared<Outcome>();
  ASSERT_TRUE(s->Submit(Greedy(follow, 1, second)));
  second->done.get_future().wait();
  ASSERT_GE(seen.size(), 1u);
  ASSERT_EQ(seen[0].size(), 1u);
  EXPECT_EQ(seen[0][0].request, 2u);
  EXPECT_EQ(seen[0][0].done, 13);
  EXPECT_EQ(seen[0][0].total, static_cast<int>(follow.size()));
  s->Stop();
  EXPECT_TRUE(s->stats().prefilling.empty());
}

TEST_P(SchedulerTest, AFollowUpTurnResumesFromTheKeptStateWithTheLogitsOfAFullPrefill) {
  SchedulerOptions o;
  o.context = 64;
  auto s = Make(o);
  auto first = std::make_shared<Outcome>();
  ASSERT_TRUE(s->Submit(Greedy(prompts_[0], 4, first)));
  first->done.get_future().wait();
  // The next turn: the prompt, the reply, a new user turn.
  std::vector<int> follow = prompts_[0];
  follow.insert(follow.end(), first->tokens.begin(), first->tokens.end());
  follow.insert(follow.end(), prompts_[1].begin(), prompts_[1].end());
  auto resumed = std::make_shared<Outcome>();
  ASSERT_TRUE(s->Submit(Greedy(follow, 3, resumed)));
  resumed->done.get_future().wait();
  // Kept at the reply's end: the prompt and every reply token but the last (never run).
  EXPECT_EQ(resumed->end.reused_tokens,
            static_cast<int>(prompts_[0].size() + first->tokens.size() - 1));
  EXPECT_EQ(s->stats().reused_tokens, static_cast<uint64_t>(resumed->end.reused_tokens));

  o.prefix_cache_bytes = 0;
  auto fresh_s = Make(o);
  auto fresh = std::make_shared<Outcome>();
  ASSERT_TRUE(fresh_s->Submit(Greedy(follow, 3, fresh)));
  fresh->done.get_future().wait();
  EXPECT_EQ(fresh->end.reused_tokens, 0);
  ASSERT_EQ(resumed->logits.size(), fresh->logits.size());
  for (size_t i = 0; i < fresh->logits.size(); ++i)
    EXPECT_EQ(0, std::memcmp(resumed->logits[i].data(), fresh->logits[i].data(),
                             fresh->logits[i].size() * 4))
        << "token " << i;
  // The same prompt again resumes whole, from the state kept at its end.
  auto again = std::make_shared<Outcome>();
  ASSERT_TRUE(s->Submit(Greedy(follow, 3, again)));
  again->done.get_future().wait();
  EXPECT_EQ(again->end.reused_tokens, static_cast<int>(follow.size()));
  EXPECT_EQ(again->tokens, fresh->tokens);
}

// Another scheduler (another process, or this one after a restart) starts
// from a state this one published at its prompt's end, with the logits of a
// full prefill, bit for bit; prompts shorter than share_min_tokens are
// neither published nor looked up.
TEST_P(SchedulerTest, AStatePublishedByAnotherSchedulerGivesTheLogitsOfAFullPrefill) {
  SchedulerOptions o;
  o.context = 64;
  o.chunk = 6;
  o.share_min_tokens = 9;
  SharedStates shared;
  std::vector<int> prompt = prompts_[2];  // 13 tokens
  {
    auto a = Make(o, nullptr, &shared);
    auto small = std::make_shared<Outcome>();
    ASSERT_TRUE(a->Submit(Greedy(prompts_[0], 1, small)));  // 5 tokens: not published
    small->done.get_future().wait();
    auto first = std::make_shared<Outcome>();
    ASSERT_TRUE(a->Submit(Greedy(prompt, 2, first)));
    first->done.get_future().wait();
    EXPECT_EQ(a->stats().shared_published, 1u);
  }
  ASSERT_EQ(shared.states.size(), 1u);
  EXPECT_EQ(shared.states[0].first, prompt);
  // The next turn, in a scheduler with nothing kept.
  std::vector<int> follow = prompt;
  for (int t : prompts_[1]) follow.push_back(t);
  auto b = Make(o, nullptr, &shared);
  auto resumed = std::make_shared<Outcome>();
  ASSERT_TRUE(b->Submit(Greedy(follow, 3, resumed)));
  resumed->done.get_future().wait();
  EXPECT_EQ(resumed->end.reused_tokens, static_cast<int>(prompt.size()));
  EXPECT_EQ(b->stats().shared_found, 1u);
  b.reset();

  o.prefix_cache_bytes = 0;
  o.share_min_tokens = 1 << 20;
  auto fresh_s = Make(o);
  auto fresh = std::make_shared<Outcome>();
  ASSERT_TRUE(fresh_s->Submit(Greedy(follow, 3, fresh)));
  fresh->done.get_future().wait();
  EXPECT_EQ(fresh->end.reused_tokens, 0);
  ASSERT_EQ(resumed->logits.size(), fresh->logits.size());
  for (size_t i = 0; i < fresh->logits.size(); ++i)
    EXPECT_EQ(0, std::memcmp(resumed->logits[i].data(), fresh->logits[i].data(),
                             fresh->logits[i].size() * 4))
        << "token " << i;
  EXPECT_EQ(resumed->tokens, fresh->tokens);
}

// A shared state that does not add up is refused and the prompt is run.
TEST_P(SchedulerTest, ADamagedSharedStateIsRefusedAndThePromptRun) {
  const int V = engine_->model().config().vocab;
  const uint64_t fp = ModelFingerprint(engine_->model().container());
  Session s = engine_->model().NewSession(64);
  std::vector<float> logits(V);
  ASSERT_TRUE(engine_->model().Forward(s, prompts_[2], logits.data()).ok());
  const std::vector<uint8_t> good = PackPromptState(fp, TakeSnapshot(s), logits);
  EXPECT_TRUE(UnpackPromptState(good, fp, static_cast<int>(prompts_[2].size()), V).ok());
  EXPECT_FALSE(UnpackPromptState(good, fp + 1, static_cast<int>(prompts_[2].size()), V).ok());
  EXPECT_FALSE(UnpackPromptState(good, fp, static_cast<int>(prompts_[2].size()) - 1, V).ok());
  EXPECT_FALSE(UnpackPromptState(std::span(good).first(good.size() - 4), fp,
                                 static_cast<int>(prompts_[2].size()), V).ok());

  SchedulerOptions o;
  o.context = 64;
  o.share_min_tokens = 9;
  SharedStates shared;
  shared.states.push_back({prompts_[2], std::vector<uint8_t>(good.begin(), good.end() - 4)});
  auto sch = Make(o, nullptr, &shared);
  auto out = std::make_shared<Outcome>();
  ASSERT_TRUE(sch->Submit(Greedy(prompts_[2], 1, out)));
  out->done.get_future().wait();
  EXPECT_EQ(out->end.reused_tokens, 0);
  EXPECT_EQ(sch->stats().shared_found, 0u);
  ASSERT_EQ(out->logits.size(), 1u);
  EXPECT_EQ(0, std::memcmp(out->logits[0].data(), logits.data(), logits.size() * 4));
}

TEST_P(SchedulerTest, AnEndTokenEndsTheReplyAndIsNotPassedOn) {
  const std::vector<int> greedy = ForwardGreedy(prompts_[1], 5);
  auto s = Make({});
  auto out = std::make_shared<Outcome>();
  auto g = Greedy(prompts_[1], 5, out);
  g->end_tokens = {greedy[2]};
  ASSERT_TRUE(s->Submit(g));
  out->done.get_future().wait();
  const size_t cut =
      static_cast<size_t>(std::find(greedy.begin(), greedy.end(), greedy[2]) - greedy.begin());
  EXPECT_EQ(out->end.reason, EndReason::kStop);
  EXPECT_EQ(out->tokens, std::vector<int>(greedy.begin(), greedy.begin() + static_cast<long>(cut)));
}

// A response_format's constraint: the sampler chooses among what the
// grammar allows, on_token gets the model's own logits, and an end token
// (made the model's favourite here) comes only once the value is complete.
TEST_P(SchedulerTest, AConstraintMasksTheChoiceNotTheLogitsAndEndsWhenTheValueIs) {
  auto tok = Tokenizer::Load(engine_->dir());
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const int V = engine_->model().config().vocab;
  const int e = engine_->model().config().eos_tokens.at(0);  // the family's end of turn
  ASSERT_GE(e, 0);
  const auto index = std::make_shared<const grammar::VocabIndex>(*tok, V);
  auto s = Make({}, [this, e](std::span<const Model::BatchItem> items) {
    const Status st = engine_->model().ForwardBatch(items);
    for (const auto& item : items) item.logits[e] += 100.f;
    return st;
  });
  const auto run = [&](std::shared_ptr<const grammar::JsonGrammar> g) {
    auto out = std::make_shared<Outcome>();
    auto gen = Greedy(prompts_[0], 40, out);
    gen->end_tokens = {e};
    if (g) gen->constraint = std::make_unique<grammar::JsonTokenConstraint>(g, index);
    EXPECT_TRUE(s->Submit(gen));
    out->done.get_future().wait();
    return out;
  };
  const auto free = run(nullptr);
  EXPECT_TRUE(free->tokens.empty());  // the end token at once
  // An integer (after white space, which the grammar allows first):
  // complete after its first digits, and then the end token wins.
  const auto number =
      run(*grammar::CompileJsonSchema(nlohmann::json::parse(R"({"type":"integer"})")));
  ASSERT_EQ(number->end.reason, EndReason::kStop);
  ASSERT_FALSE(number->tokens.empty());
  const std::string last = tok->Decode(std::span<const int>(number->tokens).last(1));
  const std::string before =
      tok->Decode(std::span<const int>(number->tokens).first(number->tokens.size() - 1));
  EXPECT_TRUE(!last.empty() && last.find_first_not_of("-0123456789") == std::string::npos) << last;
  EXPECT_EQ(before.find_first_not_of(" \t\n\r"), std::string::npos) << before;
  // Its first logits are the model's own, the end token's boost and all.
  EXPECT_GT(number->logits[0][static_cast<size_t>(e)], 50.f);
  // An enum: the reply ends as soon as the value is finished.
  const auto yes =
      run(*grammar::CompileJsonSchema(nlohmann::json::parse(R"({"enum":["yes","no"]})")));
  EXPECT_EQ(yes->end.reason, EndReason::kStop);
  std::string text = tok->Decode(yes->tokens);
  text.erase(0, text.find_first_not_of(" \t\n\r"));
  EXPECT_TRUE(text == "\"yes\"" || text == "\"no\"") << text;
}

TEST_P(SchedulerTest, ACancelledGenerationEndsWithinAStep) {
  auto s = Make({});
  auto out = std::make_shared<Outcome>();
  auto g = Greedy(prompts_[0], 1000, out);
  std::promise<void> two;
  auto inner = g->on_token;
  g->on_token = [inner, out, &two](int t, std::span<const float> l) {
    inner(t, l);
    std::lock_guard<std::mutex> lock(out->mu);
    if (out->tokens.size() == 2) two.set_value();
    return true;
  };
  ASSERT_TRUE(s->Submit(g));
  two.get_future().wait();
  g->cancelled = true;  // from this thread, as a server's disconnect would
  out->done.get_future().wait();
  EXPECT_EQ(out->end.reason, EndReason::kCancelled);
  EXPECT_LT(out->end.completion_tokens, 1000);
}

TEST_P(SchedulerTest, AFullQueueRefusesAndStopEndsEverything) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  bool first = true;
  SchedulerOptions o;
  o.parallel = 1;
  o.queue = 1;
  auto s = Make(o, [&](std::span<const Model::BatchItem> items) {
    if (first) {
      first = false;
      entered.set_value();
      released.wait();
    }
    return engine_->model().ForwardBatch(items);
  });
  auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>(),
       c = std::make_shared<Outcome>();
  ASSERT_TRUE(s->Submit(Greedy(prompts_[0], 1000, a)));
  entered.get_future().wait();                         // a runs, held in its first step
  ASSERT_TRUE(s->Submit(Greedy(prompts_[1], 4, b)));   // waits for a's place
  EXPECT_FALSE(s->Submit(Greedy(prompts_[2], 4, c)));  // the queue is full
  EXPECT_EQ(s->stats().queued, 1u);
  release.set_value();
  s->Stop();
  a->done.get_future().wait();
  b->done.get_future().wait();
  EXPECT_EQ(a->end.reason, EndReason::kCancelled);
  EXPECT_EQ(b->end.reason, EndReason::kCancelled);
  EXPECT_FALSE(s->Submit(Greedy(prompts_[2], 4, c)));  // stopped
}

TEST_P(SchedulerTest, APromptWithNoRoomAndAFailingStepEndInErrors) {
  SchedulerOptions o;
  o.context = 8;
  auto s = Make(o);
  auto big = std::make_shared<Outcome>();
  ASSERT_TRUE(s->Submit(Greedy(prompts_[2], 4, big)));  // 13 tokens
  big->done.get_future().wait();
  EXPECT_EQ(big->end.reason, EndReason::kError);
  EXPECT_NE(big->end.error.find("no room"), std::string::npos) << big->end.error;

  auto failing = Make(
      {}, [](std::span<const Model::BatchItem>) { return Status::Error("the daemon went away"); });
  auto out = std::make_shared<Outcome>();
  ASSERT_TRUE(failing->Submit(Greedy(prompts_[0], 4, out)));
  out->done.get_future().wait();
  EXPECT_EQ(out->end.reason, EndReason::kError);
  EXPECT_EQ(out->end.error, "the daemon went away");
  EXPECT_TRUE(out->tokens.empty());
}

// A model gone for good (wasted went away and none came back): no session
// can be had, the generation ends in that error, and attached() says so.
TEST_P(SchedulerTest, NoSessionEndsTheGenerationInAnErrorAndAttachedSaysSo) {
  struct Gone : Stepper {
    bool gone = false;
    Status Step(std::span<const Model::BatchItem>) override { return Status::Error("no step"); }
    Result<Session> NewSession(int) override {
      gone = true;
      return Status::Error("wasted went away: not continuing");
    }
    bool attached() const override { return !gone; }
  } model;
  Scheduler s({}, engine_->model().config().vocab, model);
  EXPECT_TRUE(s.attached());
  auto out = std::make_shared<Outcome>();
  ASSERT_TRUE(s.Submit(Greedy(prompts_[0], 4, out)));
  out->done.get_future().wait();
  EXPECT_EQ(out->end.reason, EndReason::kError);
  EXPECT_EQ(out->end.error, "wasted went away: not continuing");
  EXPECT_TRUE(out->tokens.empty());
  EXPECT_FALSE(s.attached());
  s.Stop();
}

// Generations of one prompt submitted together (OpenAI's n) run it once,
// with no state kept: the first admitted prefills it, the rest start from a
// copy of its state there, those beside it in the batch and those queued
// behind; each then samples on its own, the model's own greedy reply.
TEST_P(SchedulerTest, AGroupPrefillsItsPromptOnceAndEachSamplesOnItsOwn) {
  SchedulerOptions o;
  o.context = 64;
  o.chunk = 4;  // the prompt takes four steps
  o.parallel = 2;
  o.prefix_cache_bytes = 0;
  const std::vector<int>& prompt = prompts_[2];
  const std::vector<int> forward = ForwardGreedy(prompt, 5);
  auto s = Make(o);
  std::vector<std::shared_ptr<Outcome>> outs;
  std::vector<std::shared_ptr<Generation>> group;
  for (int i = 0; i < 4; ++i) {
    outs.push_back(std::make_shared<Outcome>());
    group.push_back(Greedy(prompt, 5, outs.back()));
  }
  ASSERT_TRUE(s->SubmitGroup(group));
  for (const auto& out : outs) out->done.get_future().wait();
  const int p = static_cast<int>(prompt.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    EXPECT_EQ(outs[i]->end.reason, EndReason::kLength) << i;
    EXPECT_EQ(outs[i]->tokens, forward) << i;
    EXPECT_EQ(outs[i]->end.reused_tokens, i == 0 ? 0 : p) << i;
    // The first token's logits: the prompt state's, copied.
    ASSERT_FALSE(outs[i]->logits.empty());
    EXPECT_EQ(outs[i]->logits[0], outs[0]->logits[0]) << i;
  }
  EXPECT_EQ(s->stats().prompt_tokens, 4u * p);
  EXPECT_EQ(s->stats().reused_tokens, 3u * p);  // run once
}

// The one prefilling a group's prompt goes away (its client left) before
// the prompt has run: the next takes it on, and the last starts from its state.
TEST_P(SchedulerTest, AGroupWhosePrefillerLeavesGoesOnWithTheNext) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  bool first = true;
  SchedulerOptions o;
  o.context = 64;
  o.chunk = 4;
  o.parallel = 3;
  o.prefix_cache_bytes = 0;
  auto s = Make(o, [&](std::span<const Model::BatchItem> items) {
    if (first) {
      first = false;
      entered.set_value();
      released.wait();
    }
    return engine_->model().ForwardBatch(items);
  });
  const std::vector<int>& prompt = prompts_[2];
  const std::vector<int> forward = ForwardGreedy(prompt, 3);
  std::vector<std::shared_ptr<Outcome>> outs;
  std::vector<std::shared_ptr<Generation>> group;
  for (int i = 0; i < 3; ++i) {
    outs.push_back(std::make_shared<Outcome>());
    group.push_back(Greedy(prompt, 3, outs.back()));
  }
  ASSERT_TRUE(s->SubmitGroup(group));
  entered.get_future().wait();  // the first's prompt runs, the others wait
  group[0]->cancelled = true;
  release.set_value();
  for (const auto& out : outs) out->done.get_future().wait();
  EXPECT_EQ(outs[0]->end.reason, EndReason::kCancelled);
  EXPECT_TRUE(outs[0]->tokens.empty());
  for (size_t i = 1; i < outs.size(); ++i) EXPECT_EQ(outs[i]->tokens, forward) << i;
  EXPECT_EQ(outs[1]->end.reused_tokens, 0);
  EXPECT_EQ(outs[2]->end.reused_tokens, static_cast<int>(prompt.size()));
}

// A group is queued whole or not at all: never more than the batch's free
// places and the queue take.
TEST_P(SchedulerTest, AGroupIsQueuedWholeOrNotAtAll) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  bool first = true;
  SchedulerOptions o;
  o.parallel = 1;
  o.queue = 1;
  auto s = Make(o, [&](std::span<const Model::BatchItem> items) {
    if (first) {
      first = false;
      entered.set_value();
      released.wait();
    }
    return engine_->model().ForwardBatch(items);
  });
  EXPECT_EQ(s->capacity(), 2u);
  auto group_of = [&](int n, std::vector<std::shared_ptr<Outcome>>* outs) {
    std::vector<std::shared_ptr<Generation>> g;
    for (int i = 0; i < n; ++i) {
      outs->push_back(std::make_shared<Outcome>());
      g.push_back(Greedy(prompts_[0], 2, outs->back()));
    }
    return g;
  };
  std::vector<std::shared_ptr<Outcome>> three, two, late;
  EXPECT_FALSE(s->SubmitGroup(group_of(3, &three)));  // more than it ever holds
  ASSERT_TRUE(s->SubmitGroup(group_of(2, &two)));
  entered.get_future().wait();  // one runs, one waits in the queue
  EXPECT_EQ(s->stats().queued, 1u);
  EXPECT_FALSE(s->SubmitGroup(group_of(2, &late)));  // no room for both: neither queued
  EXPECT_EQ(s->stats().queued, 1u);
  release.set_value();
  for (const auto& out : two) {
    out->done.get_future().wait();
    EXPECT_EQ(out->end.reason, EndReason::kLength);
  }
  s->Stop();  // would end anything queued
  for (const auto& out : late)
    EXPECT_EQ(out->done.get_future().wait_for(std::chrono::seconds(0)),
              std::future_status::timeout);
}

INSTANTIATE_TEST_SUITE_P(Presets, SchedulerTest, ::testing::Values("tiny-kimi", "tiny-deepseek"),
                         [](const auto& p) { return std::string(p.param).substr(5); });

}  // namespace
}  // namespace waste::serve
