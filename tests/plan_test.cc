// Memory planning: sizes parse, the floor has the parts it claims, and the
// default budget follows the rule (floor + 3, 2 or 1 working sets under 3/4
// of the memory this process may use, refused below the floor).
#include "engine/plan/plan.h"

#include <gtest/gtest.h>

#include "engine/synth/synth.h"
#include "tests/test_util.h"

namespace waste {
namespace {

TEST(Plan, ParseSize) {
  EXPECT_EQ(*ParseSize("123"), 123u);
  EXPECT_EQ(*ParseSize("4G"), 4ull << 30);
  EXPECT_EQ(*ParseSize("4GiB"), 4ull << 30);
  EXPECT_EQ(*ParseSize("512m"), 512ull << 20);
  EXPECT_EQ(*ParseSize("1.5g"), 3ull << 29);
  EXPECT_EQ(*ParseSize("2T"), 2ull << 40);
  EXPECT_FALSE(ParseSize("").ok());
  EXPECT_FALSE(ParseSize("lots").ok());
  EXPECT_FALSE(ParseSize("4X").ok());
  EXPECT_FALSE(ParseSize("-1G").ok());
  EXPECT_FALSE(ParseSize("1e30").ok());
}

MemoryPlan FakePlan() {
  MemoryPlan p;
  p.context = 4096;
  p.trunk = 1000;
  p.client_state = 100;
  p.scratch = 50;
  p.min_cache = 40;
  p.daemon_overhead = 10;  // floor 1200
  p.working_set = 400;
  return p;
}

TEST(Plan, DefaultBudgetTakesAsManyWorkingSetsAsFit) {
  const MemoryPlan p = FakePlan();
  ASSERT_EQ(p.floor(), 1200u);
  // 3/4 of the limit decides: 2400 fits floor + 3 sets, 2000 fits 2, 1600 fits 1.
  EXPECT_EQ(*DefaultBudget(p, {3200, "test"}), 2400u);
  EXPECT_EQ(*DefaultBudget(p, {2668, "test"}), 2000u);
  EXPECT_EQ(*DefaultBudget(p, {2136, "test"}), 1600u);
  // Not even one working set: everything under 3/4, as long as the floor fits.
  EXPECT_EQ(*DefaultBudget(p, {1700, "test"}), 1275u);
  auto refused = DefaultBudget(p, {1500, "cgroup memory limit"});
  ASSERT_FALSE(refused.ok());
  const std::string& msg = refused.status().message();
  for (const char* part : {"trunk", "client state", "scratch", "minimum expert cache", "daemon",
                           "cgroup memory limit"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " missing from: " << msg;
}

TEST(Plan, FloorOfTheTinyModel) {
  const std::string dir = waste::testing::ScratchDir();
  ASSERT_TRUE(WriteSynthetic(*SynthPreset("tiny-kimi"), dir, true, 1, nullptr).ok());
  auto ct = Container::Open(dir);
  ASSERT_TRUE(ct.ok());
  const ModelConfig& c = ct->config();
  const MemoryPlan p = PlanMemory(ct->manifest(), 1000);
  // Latent KV grows with the context, the KDA state does not.
  const MemoryPlan p2 = PlanMemory(ct->manifest(), 2000);
  const uint64_t mla_layers = static_cast<uint64_t>(c.n_layers - c.n_kda_layers());
  EXPECT_EQ(p2.client_state - p.client_state, mla_layers * 1000 * (c.kv_lora + c.qk_rope) * 4);
  EXPECT_EQ(p.min_cache, uint64_t{4} * ct->record_bytes());
  EXPECT_EQ(p.working_set, p.min_cache * 5);
  // The resident trunk is every tensor but the embedding table, each padded
  // to 64 bytes, and nothing else (MLA's key rows are read in place).
  auto pad = [](uint64_t n) { return (n + 63) / 64 * 64; };
  uint64_t all = 0;
  for (const TrunkTensor& t : ct->manifest().trunk)
    if (t.name.find("embed_tokens") == std::string::npos) all += pad(t.stored_bytes());
  EXPECT_EQ(p.trunk, all);
}

// The prefill chunk: 32 when every expert fits; else as many tokens as the
// cap holds, between 32 and 2048, and no more than the context. A chunk's
// memory per token counts at least the activations, the routed slots'
// outputs and the widest attention kind's buffers, and grows with the width.
TEST(Plan, TheChunkIsLongWhenTheExpertsDoNotFitAndBoundedByItsMemory) {
  const std::string dir = waste::testing::ScratchDir();
  ASSERT_TRUE(WriteSynthetic(*SynthPreset("tiny-kimi"), dir, true, 1, nullptr).ok());
  auto ct = Container::Open(dir);
  ASSERT_TRUE(ct.ok());
  const Manifest& m = ct->manifest();
  const ModelConfig& c = m.config;
  const uint64_t per = ChunkBytesPerToken(m);
  const uint64_t f = sizeof(float);
  EXPECT_GE(per, (4 * uint64_t(c.hidden) + uint64_t(c.top_k) * c.expert_width() +
                  6 * uint64_t(c.kda_width())) * f);
  Manifest wider = m;
  wider.config.hidden *= 2;
  EXPECT_GT(ChunkBytesPerToken(wider), per);

  EXPECT_EQ(PlanChunk(m, /*experts_fit=*/true, 1ull << 40, 100000), kShortChunk);
  EXPECT_EQ(PlanChunk(m, false, 1ull << 40, 100000), kLongChunk);
  EXPECT_EQ(PlanChunk(m, false, 100 * per, 100000), 100);
  EXPECT_EQ(PlanChunk(m, false, 100 * per + per - 1, 100000), 100);
  EXPECT_EQ(PlanChunk(m, false, 5 * per, 100000), kShortChunk);  // never below today's
  EXPECT_EQ(PlanChunk(m, false, 1ull << 40, 500), 500);
  EXPECT_EQ(PlanChunk(m, true, 1ull << 40, 10), 10);

  EXPECT_EQ(ChunkScratchCap(400ull << 20), 100ull << 20);
  EXPECT_EQ(ChunkScratchCap(64ull << 30), kChunkScratchMax);
}

// wasted's share: the trunk and the cache as segments of whole pages, room
// for two clients' top-k records, the slot table and a pin page per client.
TEST(Plan, WastedsFloorAndBudget) {
  const std::string dir = waste::testing::ScratchDir();
  ASSERT_TRUE(WriteSynthetic(*SynthPreset("tiny-kimi"), dir, true, 1, nullptr).ok());
  auto ct = Container::Open(dir);
  ASSERT_TRUE(ct.ok());
  const ModelConfig& c = ct->config();
  const uint64_t page = 1 << 20;  // a made-up page, so that the rounding shows
  auto round = [&](uint64_t n) { return (n + page - 1) / page * page; };
  const SegmentCosts costs{round, [](uint32_t, uint32_t, uint32_t) -> uint64_t { return 12345; },
                           4096};
  const DaemonPlan d = PlanDaemon(ct->manifest(), costs);
  const uint64_t stride = SlotStride(ct->manifest());
  EXPECT_EQ(stride % 4096, 0u);
  EXPECT_GE(stride, ct->record_bytes());
  EXPECT_EQ(d.trunk, round(PlanMemory(ct->manifest(), 1000).trunk));
  EXPECT_EQ(d.min_cache, round(2 * uint64_t(c.top_k) * stride));
  EXPECT_EQ(d.overhead, (16ull << 20) + 12345 + kPlannedClients * 4096);
  EXPECT_EQ(d.working_set, stride * uint64_t(c.top_k) * c.n_moe_layers());
  EXPECT_EQ(d.floor(), d.trunk + d.min_cache + d.overhead);

  EXPECT_EQ(*DaemonBudget(d, d.floor(), {1, "test"}), d.floor());
  auto low = DaemonBudget(d, d.floor() - 1, {64ull << 30, "test"});
  ASSERT_FALSE(low.ok());
  for (const char* part : {"below the floor", "trunk", "smallest expert cache", "daemon overhead"})
    EXPECT_NE(low.status().message().find(part), std::string::npos) << low.status().message();
  EXPECT_EQ(*DaemonBudget(d, 0, {64ull << 30, "test"}), d.floor() + 3 * d.working_set);
  EXPECT_FALSE(DaemonBudget(d, 0, {d.floor(), "test"}).ok());  // 3/4 of it is below the floor
}

// Two daemons on one machine: the second leaves the first what it holds,
// takes as many working sets as fit in what is left of 3/4, and refuses
// naming the first when not even its floor fits there. An explicit budget
// is the user's word and stands.
TEST(Plan, ASecondDaemonSizesItselfAgainstWhatTheOthersHold) {
  DaemonPlan d;
  d.trunk = 1000;
  d.overhead = 100;
  d.min_cache = 100;
  d.working_set = 500;
  const MemoryLimit limit{8000, "test"};  // 3/4 of it: 6000
  EXPECT_EQ(*DaemonBudget(d, 0, limit, {}), d.floor() + 3 * d.working_set);
  // 6000 - 4000 = 2000 left: floor 1200 + one working set.
  EXPECT_EQ(*DaemonBudget(d, 0, limit, {4000, "pid 1"}), d.floor() + d.working_set);
  // 300 left: not even the floor.
  auto refused = DaemonBudget(d, 0, limit, {5700, "pid 812 (uid 0, 5.57 KiB resident): wasted /m"});
  ASSERT_FALSE(refused.ok());
  for (const char* part : {"already running hold 5.57 KiB", "leave 300 B", "pid 812", "--budget"})
    EXPECT_NE(refused.status().message().find(part), std::string::npos) << refused.status().message();
  EXPECT_FALSE(DaemonBudget(d, 0, limit, {9000, "pid 1"}).ok());  // more than the cap
  EXPECT_EQ(*DaemonBudget(d, 5000, limit, {5700, "pid 1"}), 5000u);
}

TEST(Plan, ProcessMemoryLimitIsSomething) {
  const MemoryLimit lim = ProcessMemoryLimit();
  EXPECT_GT(lim.bytes, 64ull << 20);
  EXPECT_FALSE(lim.source.empty());
}

}  // namespace
}  // namespace waste
