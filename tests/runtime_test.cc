// The engine a program runs (runtime/engine.h), in this process and over a
// real wasted started as a child process: OpenEngine on a synthetic
// container, its errors as values (a missing container, a bad budget,
// unknown option values, a daemon serving another container), ForwardThroughRestarts and the batch
// step giving Model::Forward's logits bit for bit, and both going on after
// wasted is killed and started again between two steps, with the logits of
// a run never interrupted.
#include "runtime/engine.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/plan/plan.h"
#include "engine/synth/synth.h"
#include "tests/support/child.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace waste {
namespace {

bool Has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// `n` token ids below `vocab`, different for each `seed`.
std::vector<int> Tokens(int n, int vocab, int seed) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int>((3 + 37 * i + 101 * seed) % vocab));
  return t;
}

// wasted serving a container on a socket, in the foreground as a child of
// this process (Child), SIGKILLed when the object goes, as a crash ends it.
class Wasted {
 public:
  Wasted(const std::string& container, const std::string& socket, const std::string& dir)
      : child_(testing::Child::Run({testing::Bin("wasted"), container, "--socket", socket,
                                    "--foreground", "--state-dir", dir + "/state",
                                    // States straight to disk: a crash (below) loses
                                    // the memory tier's, a stop writes them there.
                                    "--states-memory", "0"})) {
    for (int i = 0; i < 2000 && !testing::Connectable(socket); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    listening_ = testing::Connectable(socket);
  }
  ~Wasted() { Kill(); }

  bool listening() const { return listening_; }
  // What it printed; only once it has exited (Kill), else what came so far.
  std::string log() {
    if (!killed_) Kill();
    return child_.Output();
  }
  // SIGKILL; waits for it to be gone.
  void Kill() {
    if (killed_) return;
    child_.Signal(SIGKILL);
    child_.Wait();
    killed_ = true;
  }

 private:
  testing::Child child_;
  bool listening_ = false;
  bool killed_ = false;
};

// Waits until the engine's link has seen its daemon go (a crash is seen
// within milliseconds), so that the next call must attach again rather
// than finish over the old mappings.
bool SeenGone(const Engine& e) {
  for (int i = 0; i < 500; ++i) {
    if (!e.daemon->Health().ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = waste::testing::ScratchDir();
    kimi_ = dir_ + "/tiny-kimi";
    ASSERT_TRUE(WriteSynthetic(*SynthPreset("tiny-kimi"), kimi_, true, 2, nullptr).ok());
    socket_ = dir_ + "/wasted.sock";
    auto ct = Container::Open(kimi_);
    ASSERT_TRUE(ct.ok()) << ct.status().message();
    ct_ = std::make_unique<Container>(std::move(*ct));
    vocab_ = ct_->config().vocab;
  }

  // Options for the tiny container in this process, or over wasted at socket_.
  EngineOptions Options(bool local) const {
    EngineOptions o;
    o.container = kimi_;
    o.threads = 2;
    o.context = 256;
    o.socket = socket_;
    o.local = local;
    o.budget = "64M";
    return o;
  }

  // Model::Forward's logits after each of `runs` in turn, over a cache and
  // model of the test's own: the reference.
  std::vector<std::vector<float>> Reference(const std::vector<std::vector<int>>& runs) {
    CacheOptions co;
    co.slots = 1000;
    auto cache = ExpertCache::Create(*ct_, co);
    EXPECT_TRUE(cache.ok()) << cache.status().message();
    ModelOptions mo;
    mo.threads = 2;
    auto m = Model::Load(*ct_, cache->get(), mo);
    EXPECT_TRUE(m.ok()) << m.status().message();
    Session s = (*m)->NewSession(256);
    std::vector<std::vector<float>> out;
    for (const auto& tokens : runs) {
      out.emplace_back(vocab_);
      EXPECT_TRUE((*m)->Forward(s, tokens, out.back().data()).ok());
    }
    return out;
  }

  std::string dir_, kimi_, socket_;
  std::unique_ptr<Container> ct_;
  int vocab_ = 0;
};

TEST_F(RuntimeTest, OpensATinyContainerInThisProcess) {
  auto e = OpenEngine(Options(/*local=*/true));
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->where, "in process");
  EXPECT_EQ(e->budget, 64ull << 20);
  EXPECT_EQ(e->daemon, nullptr);
  ASSERT_NE(e->cache, nullptr);
  EXPECT_EQ(e->experts, e->cache.get());
  // 64 MiB holds every record of the tiny model.
  EXPECT_EQ(e->cache_slots, uint64_t(ct_->config().n_experts) * ct_->config().n_moe_layers());
  ASSERT_NE(e->model, nullptr);
  EXPECT_TRUE(e->attached());
  ASSERT_TRUE(e->tokenizer.has_value());
  EXPECT_EQ(e->model_options.threads, 2);
  EXPECT_EQ(e->options.container, kimi_);
  auto s = e->NewSession(100);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->max_context, 100);
  EXPECT_EQ(s->position, 0);
}

// With no --chunk the engine plans it (engine/plan/plan.h): 32 when the
// budget's cache holds every record; a long chunk, its memory taken from
// the cache, when it does not; an explicit --chunk wins. The long chunk's
// logits are those of chunks of 32, bit for bit. (Q4GR experts: VQ's
// lookup tables, 200 KiB a token at the tiny shapes, would leave a cache
// this small no room for more than 32.)
TEST_F(RuntimeTest, TheChunkIsPlannedLongWhenTheExpertsDoNotFit) {
  auto all_fit = OpenEngine(Options(true));  // 64 MiB: every record
  ASSERT_TRUE(all_fit.ok()) << all_fit.status().message();
  EXPECT_EQ(all_fit->model_options.chunk, kShortChunk);
  EXPECT_EQ(all_fit->chunk_scratch, kShortChunk * ChunkBytesPerToken(ct_->manifest()));

  const std::string q4gr = dir_ + "/tiny-kimi-q4gr";
  auto spec = SynthPreset("tiny-kimi");
  ASSERT_TRUE(spec.ok());
  spec->expert_fmt = format::Fmt::kQ4GR;
  ASSERT_TRUE(WriteSynthetic(*spec, q4gr, true, 2, nullptr).ok());
  auto ct = Container::Open(q4gr);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  const Manifest& m = ct->manifest();
  EngineOptions o = Options(true);
  o.container = q4gr;
  const MemoryPlan plan = PlanMemory(m, o.context);
  const uint64_t fixed = plan.trunk + plan.client_state + plan.scratch;
  const uint64_t records = uint64_t(m.config.n_experts) * m.config.n_moe_layers();
  // Room for all but 4 records: a quarter of it holds about 60 tokens'
  // chunk memory (16 KiB each), taken from the cache.
  const uint64_t budget = fixed + (records - 4) * ct->record_bytes();
  o.budget = std::to_string(budget);
  auto most = OpenEngine(o);
  ASSERT_TRUE(most.ok()) << most.status().message();
  const int chunk = most->model_options.chunk;
  EXPECT_EQ(chunk, PlanChunk(m, false, ChunkScratchCap(budget - fixed), o.context));
  EXPECT_GT(chunk, kShortChunk);
  EXPECT_EQ(most->chunk_scratch, static_cast<uint64_t>(chunk) * ChunkBytesPerToken(m));
  EXPECT_EQ(most->cache_slots, (budget - fixed - most->chunk_scratch) / ct->record_bytes());
  EXPECT_LT(most->cache_slots, records);

  const std::vector<int> prompt = Tokens(200, vocab_, 1);
  std::vector<float> logits(vocab_), ref(vocab_);
  Session s = most->model->NewSession(256);
  ASSERT_TRUE(ForwardThroughRestarts(*most, s, prompt, logits.data()).ok());
  CacheOptions co;
  co.slots = 1000;
  auto cache = ExpertCache::Create(*ct, co);
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  ModelOptions mo;  // chunks of 32
  mo.threads = 2;
  auto model = Model::Load(*ct, cache->get(), mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  Session rs = (*model)->NewSession(256);
  ASSERT_TRUE((*model)->Forward(rs, prompt, ref.data()).ok());
  EXPECT_EQ(0, std::memcmp(logits.data(), ref.data(), logits.size() * 4));

  o.chunk = 5;
  auto explicit_chunk = OpenEngine(o);
  ASSERT_TRUE(explicit_chunk.ok()) << explicit_chunk.status().message();
  EXPECT_EQ(explicit_chunk->model_options.chunk, 5);
}

TEST_F(RuntimeTest, ErrorsAreValuesThatSayWhatIsWrong) {
  EngineOptions o = Options(true);
  o.container = dir_ + "/nothing-here";
  auto missing = OpenEngine(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Has(missing.status().message(), dir_ + "/nothing-here")) << missing.status().message();

  o = Options(true);
  o.budget = "lots";
  auto unreadable = OpenEngine(o);
  ASSERT_FALSE(unreadable.ok());
  EXPECT_TRUE(Has(unreadable.status().message(), "--budget")) << unreadable.status().message();

  o.budget = "1M";  // below the trunk, state and scratch of even the tiny model
  auto small = OpenEngine(o);
  ASSERT_FALSE(small.ok());
  EXPECT_TRUE(Has(small.status().message(), "leaves no room for one expert record"))
      << small.status().message();

  o = Options(true);
  o.isa = "vax";
  auto isa = OpenEngine(o);
  ASSERT_FALSE(isa.ok());
  EXPECT_TRUE(Has(isa.status().message(), "--isa vax")) << isa.status().message();
  o.isa.clear();
  o.expert_table = "f16";
  auto table = OpenEngine(o);
  ASSERT_FALSE(table.ok());
  EXPECT_TRUE(Has(table.status().message(), "--expert-table f16")) << table.status().message();
}

TEST_F(RuntimeTest, ForwardAndStepGiveModelForwardsLogitsBitForBit) {
  const std::vector<int> prompt = Tokens(11, vocab_, 0), more = Tokens(3, vocab_, 1);
  const auto want = Reference({prompt, more});
  const auto other = Reference({Tokens(7, vocab_, 2)});
  auto e = OpenEngine(Options(true));
  ASSERT_TRUE(e.ok()) << e.status().message();

  auto s = e->NewSession(256);
  ASSERT_TRUE(s.ok());
  std::vector<float> got(vocab_);
  ASSERT_TRUE(ForwardThroughRestarts(*e, *s, prompt, got.data()).ok());
  EXPECT_EQ(got, want[0]);
  EXPECT_EQ(s->position, 11);
  ASSERT_TRUE(ForwardThroughRestarts(*e, *s, more, got.data()).ok());
  EXPECT_EQ(got, want[1]);
  EXPECT_NE(want[0], want[1]);  // the comparison can tell them apart

  // Two sequences in one step: each gets its solo logits.
  auto a = e->NewSession(256), b = e->NewSession(256);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<int> other_prompt = Tokens(7, vocab_, 2);
  std::vector<float> la(vocab_), lb(vocab_);
  const Model::BatchItem items[2] = {{&*a, prompt, la.data()}, {&*b, other_prompt, lb.data()}};
  ASSERT_TRUE(e->Step(items).ok());
  EXPECT_EQ(la, want[0]);
  EXPECT_EQ(lb, other[0]);
  const Model::BatchItem next[1] = {{&*a, more, la.data()}};
  ASSERT_TRUE(StepThroughRestarts(*e, next).ok());
  EXPECT_EQ(la, want[1]);
  EXPECT_EQ(a->position, 14);
}

TEST_F(RuntimeTest, AttachedToWastedAStepGoesOnAfterAKillAndARestart) {
  const std::vector<int> prompt = Tokens(11, vocab_, 0), more = Tokens(3, vocab_, 1),
                         last = Tokens(2, vocab_, 3);
  const auto want = Reference({prompt, more, last});
  auto daemon = std::make_unique<Wasted>(kimi_, socket_, dir_);
  ASSERT_TRUE(daemon->listening()) << daemon->log();
  auto e = OpenEngine(Options(/*local=*/false));
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->where, "wasted at " + socket_);
  ASSERT_NE(e->daemon, nullptr);
  EXPECT_EQ(e->cache, nullptr);
  EXPECT_EQ(e->experts, e->daemon->source.get());

  auto s = e->NewSession(256);
  ASSERT_TRUE(s.ok());
  std::vector<float> got(vocab_);
  ASSERT_TRUE(ForwardThroughRestarts(*e, *s, prompt, got.data()).ok());
  EXPECT_EQ(got, want[0]);

  // Killed between two steps and started again: the next step attaches to
  // the new daemon, builds the model again and runs as if nothing happened.
  daemon->Kill();
  ASSERT_TRUE(SeenGone(*e));
  daemon = std::make_unique<Wasted>(kimi_, socket_, dir_);
  ASSERT_TRUE(daemon->listening()) << daemon->log();
  ASSERT_TRUE(ForwardThroughRestarts(*e, *s, more, got.data()).ok());
  EXPECT_EQ(got, want[1]);
  EXPECT_TRUE(e->attached());
  EXPECT_TRUE(e->lost.empty()) << e->lost;
  ASSERT_NE(e->daemon, nullptr);
  EXPECT_TRUE(e->daemon->Health().ok());

  // The same through the batch step, the daemon started again only while
  // the step waits for it.
  daemon->Kill();
  ASSERT_TRUE(SeenGone(*e));
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    daemon = std::make_unique<Wasted>(kimi_, socket_, dir_);
  });
  const Model::BatchItem items[1] = {{&*s, last, got.data()}};
  const Status st = e->Step(items);
  later.join();
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(got, want[2]);
  EXPECT_EQ(s->position, 16);
}

// A prompt state published through wasted by one engine is found by
// another (another client, as another process would be) and, after wasted
// crashed and started again, from its file: the logits there and after more
// tokens are a full prefill's, bit for bit.
TEST_F(RuntimeTest, APromptStateSharedThroughWastedGivesAFullPrefillsLogits) {
  const std::vector<int> prompt = Tokens(11, vocab_, 0), more = Tokens(3, vocab_, 1);
  const auto want = Reference({prompt, more});
  std::vector<int> longer = prompt;
  longer.insert(longer.end(), more.begin(), more.end());
  auto daemon = std::make_unique<Wasted>(kimi_, socket_, dir_);
  ASSERT_TRUE(daemon->listening()) << daemon->log();
  {
    auto e = OpenEngine(Options(/*local=*/false));
    ASSERT_TRUE(e.ok()) << e.status().message();
    auto s = e->NewSession(256);
    ASSERT_TRUE(s.ok());
    std::vector<float> got(vocab_);
    ASSERT_TRUE(ForwardThroughRestarts(*e, *s, prompt, got.data()).ok());
    e->PublishSharedState(prompt, *s, got);
    EXPECT_FALSE(e->share_refusal_said);
  }
  // `found` starts from the state, then runs `more`.
  auto resume = [&](Engine& e) {
    auto s = e.NewSession(256);
    EXPECT_TRUE(s.ok());
    std::vector<float> logits(vocab_);
    EXPECT_EQ(e.FindSharedState(longer, static_cast<int>(prompt.size()), *s, logits), 0);
    EXPECT_EQ(e.FindSharedState(longer, 0, *s, logits), static_cast<int>(prompt.size()));
    EXPECT_EQ(logits, want[0]);
    EXPECT_EQ(s->position, static_cast<int>(prompt.size()));
    EXPECT_TRUE(ForwardThroughRestarts(e, *s, more, logits.data()).ok());
    EXPECT_EQ(logits, want[1]);
  };
  {
    auto other = OpenEngine(Options(false));
    ASSERT_TRUE(other.ok()) << other.status().message();
    resume(*other);
  }
  daemon->Kill();
  daemon = std::make_unique<Wasted>(kimi_, socket_, dir_);
  ASSERT_TRUE(daemon->listening()) << daemon->log();
  auto after = OpenEngine(Options(false));
  ASSERT_TRUE(after.ok()) << after.status().message();
  resume(*after);
  // In this process alone there is nothing to share.
  auto local = OpenEngine(Options(true));
  ASSERT_TRUE(local.ok());
  auto s = local->NewSession(256);
  std::vector<float> logits(vocab_);
  EXPECT_EQ(local->FindSharedState(longer, 0, *s, logits), 0);
}

TEST_F(RuntimeTest, ADaemonServingAnotherContainerIsRefusedWithAMessage) {
  const std::string other = dir_ + "/tiny-deepseek";
  ASSERT_TRUE(WriteSynthetic(*SynthPreset("tiny-deepseek"), other, true, 2, nullptr).ok());
  const std::vector<int> prompt = Tokens(5, vocab_, 0), more = Tokens(2, vocab_, 1);
  {
    // At the start: the attach is refused.
    Wasted daemon(other, socket_, dir_);
    ASSERT_TRUE(daemon.listening()) << daemon.log();
    auto e = OpenEngine(Options(false));
    ASSERT_FALSE(e.ok());
    EXPECT_TRUE(Has(e.status().message(), "serves " + other + ", not " + kimi_))
        << e.status().message();
  }
  // After a restart: the step fails, the session keeps what it ran, and
  // the engine has no model until a daemon of its own container serves.
  auto daemon = std::make_unique<Wasted>(kimi_, socket_, dir_);
  ASSERT_TRUE(daemon->listening()) << daemon->log();
  EngineOptions o = Options(false);
  o.reattach_wait = 20;
  auto e = OpenEngine(o);
  ASSERT_TRUE(e.ok()) << e.status().message();
  auto s = e->NewSession(256);
  ASSERT_TRUE(s.ok());
  std::vector<float> got(vocab_);
  ASSERT_TRUE(ForwardThroughRestarts(*e, *s, prompt, got.data()).ok());
  daemon->Kill();
  ASSERT_TRUE(SeenGone(*e));
  daemon = std::make_unique<Wasted>(other, socket_, dir_);
  ASSERT_TRUE(daemon->listening()) << daemon->log();
  const Status st = ForwardThroughRestarts(*e, *s, more, got.data());
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "wasted went away") &&
              Has(st.message(), "a different model from " + kimi_) &&
              Has(st.message(), "not continuing"))
      << st.message();
  EXPECT_FALSE(e->attached());
  EXPECT_EQ(e->model, nullptr);
  EXPECT_EQ(s->position, 5);
  auto fresh = e->NewSession(256);
  EXPECT_FALSE(fresh.ok());
  EXPECT_TRUE(Has(fresh.status().message(), "not continuing")) << fresh.status().message();
}

}  // namespace
}  // namespace waste
