// protocol/status.h and answers.h: the status, the model description and a
// reload's outcome converted to the protocol's messages and back are what
// went in, field for field, so that wasted's metrics page (read from the
// status directly) and `wastectl metrics` (read through the protocol) say the
// same.
#include "protocol/status.h"

#include "protocol/answers.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

namespace waste {
namespace {

// Every field set, each to a value of its own.
DaemonStatus Filled() {
  DaemonStatus s;
  s.version = "1.2.3";
  s.pid = 1;
  s.uptime_seconds = 2.25;
  s.container = "/models/x";
  s.arch = "kimi-linear";
  s.budget = 3;
  s.trunk_bytes = 4;
  s.cache_bytes = 5;
  s.overhead_bytes = 6;
  s.trunk_wired = true;
  s.page_kind = "transparent huge pages";
  s.slots = 7;
  s.slots_ready = 8;
  s.slots_loading = 9;
  s.slots_pinned = 10;
  s.slots_failed = 11;
  s.hits = 12;
  s.late = 13;
  s.misses = 14;
  s.reads = 15;
  s.bytes_read = 16;
  s.read_errors = 17;
  s.queued = {18, 19, 20};
  s.in_flight = {21, 22, 23};
  s.clients.push_back({24, 25, 26, "waste run x", 27.5, 28, 29, 30, 31, 32, true});
  s.clients.push_back({33, 34, 35, "wastectl", 36.5, 37, 38, 39, 40, 41, false});
  s.io_depth = 42;
  s.policy = "lru";
  s.lookahead_reads = 43;
  s.lookahead_used = 44;
  s.lookahead_unused_bytes = 45;
  s.lookahead_dropped = 46;
  s.demand_hinted = 47;
  s.warm_reads = 48;
  s.read_busy_seconds = 49.125;
  LayerStatusInfo l;
  l.layer = 50;
  l.hits = 51;
  l.late = 52;
  l.misses = 53;
  l.slots_ready = 54;
  l.slots_loading = 55;
  l.resident = {0x03, 0x80};
  l.hottest = {{15, 56, true}, {2, 57, false}};
  s.layers.push_back(l);
  s.layers.push_back({});
  s.experts = 58;
  s.record_bytes = 59;
  return s;
}

TEST(Status, ARoundTripThroughTheProtocolLosesNothing) {
  const DaemonStatus in = Filled();
  capnp::MallocMessageBuilder message;
  auto proto = message.initRoot<proto::Status>();
  StatusToProto(in, proto);
  const DaemonStatus out = StatusFromProto(proto.asReader());
  EXPECT_EQ(out, in);
  // Equality covers every field: a change anywhere is seen.
  DaemonStatus other = in;
  other.layers[0].hottest[1].resident = true;
  EXPECT_FALSE(other == in);
}

TEST(Status, AnEmptyStatusRoundTripsToAnEmptyOne) {
  capnp::MallocMessageBuilder message;
  auto proto = message.initRoot<proto::Status>();
  StatusToProto(DaemonStatus{}, proto);
  EXPECT_EQ(StatusFromProto(proto.asReader()), DaemonStatus{});
}

TEST(Answers, TheModelDescriptionRoundTrips) {
  const DaemonModel in{"/models/x", "sha256:feed", "kimi-linear", 1, 2, 3, 4, 5, 6};
  capnp::MallocMessageBuilder message;
  auto proto = message.initRoot<proto::ModelDescription>();
  ModelToProto(in, proto);
  EXPECT_EQ(ModelFromProto(proto.asReader()), in);
}

TEST(Answers, AReloadOutcomeRoundTrips) {
  const ReloadOutcome in{{"log-level: info -> debug", "idle-exit: 0 -> 60"},
                         {"budget: 4.00 GiB -> 8.00 GiB"}};
  capnp::MallocMessageBuilder message;
  auto proto = message.initRoot<proto::Daemon::ReloadResults>();
  ReloadToProto(in, proto);
  EXPECT_EQ(ReloadFromProto(proto.asReader()), in);
}

TEST(Answers, APromptStateRoundTrips) {
  const PromptStateInfo in{16384, 300u << 20, 1000, 3600.5, 12.25, 0xfeedfacecafeull, true};
  capnp::MallocMessageBuilder message;
  auto proto = message.initRoot<proto::PromptState>();
  PromptStateToProto(in, proto);
  EXPECT_EQ(PromptStateFromProto(proto.asReader()), in);
}

}  // namespace
}  // namespace waste
