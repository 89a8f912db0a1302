// waste replay: drive a running wasted's expert cache with a routing trace
// (one JSON line per token, as `waste run --trace` writes and shared/data
// holds) and no arithmetic, so the cache policy can be measured on a real
// model's routing without the model: hit rate, reads and bytes per token.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/size_text.h"
#include "clients/waste/commands.h"
#include "clients/waste/trace.h"
#include "engine/format/container.h"
#include "link/attach.h"
#include "link/daemon_client.h"

namespace waste::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int Fail(const Status& st) {
  std::fprintf(stderr, "waste: %s\n", st.message().c_str());
  return 1;
}

struct ReplayOptions {
  std::string container, trace, socket, tokens;
  bool json = false;
};

// --tokens A:B, either side optional: tokens A to B-1 of the trace, counted
// from 0 in file order.
Status ParseRange(const std::string& text, size_t count, size_t* begin, size_t* end) {
  *begin = 0;
  *end = count;
  if (text.empty()) return Status::Ok();
  const std::string bad = "--tokens " + text;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return Status::Error(bad + ": expected A:B, e.g. 0:150");
  const auto number = [&](const std::string& s, size_t* v) {
    if (s.empty()) return true;  // the default stands
    if (s.find_first_not_of("0123456789") != std::string::npos || s.size() > 9) return false;
    *v = std::stoul(s);
    return true;
  };
  if (!number(text.substr(0, colon), begin) || !number(text.substr(colon + 1), end))
    return Status::Error(bad + ": expected A:B, e.g. 0:150");
  if (*end > count)
    return Status::Error(bad + ": the trace has " + std::to_string(count) + " tokens");
  if (*begin >= *end) return Status::Error(bad + ": selects no tokens");
  return Status::Ok();
}

int RunReplay(const ReplayOptions& o) {
  auto ct = Container::Open(o.container);
  if (!ct.ok()) return Fail(ct.status().Prefixed(o.container));
  const ModelConfig& c = ct->config();
  std::vector<int> moe;  // the container's layers with an expert bank, in order
  for (int L = 0; L < c.n_layers; ++L)
    if (ct->manifest().Bank(L) != nullptr) moe.push_back(L);
  if (moe.empty()) return Fail(Status::Error(o.container + " has no MoE layers to replay"));

  auto trace = ReadTrace(o.trace, static_cast<int>(moe.size()), c.n_experts);
  if (!trace.ok()) return Fail(trace.status());
  size_t begin = 0, end = 0;
  if (Status st = ParseRange(o.tokens, trace->size(), &begin, &end); !st.ok()) return Fail(st);

  // Unlike run or bench there is no in-process fallback: the point is to
  // measure a daemon's cache.
  ConnectFailure why;
  auto client = DaemonClient::Connect(o.socket, &why);
  if (!client.ok()) {
    if (why != ConnectFailure::kNotListening) return Fail(client.status());
    return Fail(Status::Error("no wasted is listening on " + o.socket +
                              "; replay drives a running daemon's cache, so start one first "
                              "(wasted " +
                              o.container + " --socket " + o.socket + ") or pass --socket"));
  }
  auto link = AttachDaemon(std::move(*client), o.socket, *ct);
  if (!link.ok()) return Fail(link.status());
  SharedExpertSource& source = *(*link)->source;
  // The link's own connection answers status calls too: a second
  // DaemonClient on this thread would be a second kj event loop, which kj
  // does not allow.
  DaemonClient& daemon = *(*link)->client;
  auto before = daemon.GetStatus();
  if (!before.ok()) return Fail(before.status().Prefixed("wasted at " + o.socket));

  // Each MoE layer as the forward pass does it for one token: one demand
  // hint for the layer's experts, then each acquired (waiting for a miss)
  // and released, one at a time.
  const ExpertStats s0 = source.stats();
  uint64_t acquired = 0;
  double slowest = 0;
  size_t slowest_token = begin, tokens_with_miss = 0;
  const auto t0 = Clock::now();
  for (size_t i = begin; i < end; ++i) {
    const TraceToken& tok = (*trace)[i];
    const auto tt = Clock::now();
    const uint64_t misses = source.stats().misses;
    for (size_t m = 0; m < moe.size(); ++m) {
      const std::vector<int>& experts = tok.layers[m];
      source.Hint(moe[m], experts, HintKind::kDemand);
      for (int e : experts) {
        auto rec = source.Acquire(moe[m], e);
        if (!rec.ok())
          return Fail(rec.status().Prefixed(o.trace + ": line " + std::to_string(tok.line)));
        source.Release(moe[m], e);
        ++acquired;
      }
    }
    source.TokensDone(1);
    if (source.stats().misses != misses) ++tokens_with_miss;
    if (const double s = Since(tt); s > slowest) slowest = s, slowest_token = i;
  }
  const double wall = Since(t0);
  const ExpertStats s1 = source.stats();
  auto after = daemon.GetStatus();
  if (!after.ok()) return Fail(after.status().Prefixed("wasted at " + o.socket));

  const size_t n = end - begin;
  const uint64_t hits = s1.hits - s0.hits, misses = s1.misses - s0.misses;
  const uint64_t reads = after->reads - before->reads;
  const uint64_t bytes = after->bytes_read - before->bytes_read;
  const uint64_t records = uint64_t{moe.size()} * static_cast<uint64_t>(c.n_experts);
  const uint32_t slots = (*link)->attachment.model.slots;
  const auto share = [](uint64_t part, uint64_t whole) {
    return whole ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
  };
  // Two hit rates. The client's counts an Acquire that did not wait; a read
  // that finished between the layer's hint and the Acquire counts as a hit,
  // so it depends on the disk. The cache's counts the records that were in
  // the cache (or being read) when demanded: with demand hints only, each
  // read is one record that was not, so it is 1 - reads / acquired whatever
  // the disk, which is the rate a cache policy is judged by.
  const double client_rate = share(hits, acquired);
  const double cache_rate = acquired > reads ? share(acquired - reads, acquired) : 0.0;
  // The daemon's counters are its own, not this client's: anyone else
  // attached, and reads already under way (a warm start), add to them.
  const size_t others = after->clients.empty() ? 0 : after->clients.size() - 1;
  uint64_t busy = 0;
  for (uint32_t q : before->queued) busy += q;
  for (uint32_t q : before->in_flight) busy += q;

  if (o.json) {
    const json j = {{"container", o.container},
                    {"trace", o.trace},
                    {"socket", o.socket},
                    {"first_token", begin},
                    {"end_token", end},
                    {"tokens", n},
                    {"moe_layers", moe.size()},
                    {"experts", c.n_experts},
                    {"slots", slots},
                    {"records", records},
                    {"cache_share", share(slots, records)},
                    {"acquired", acquired},
                    {"hits", hits},
                    {"misses", misses},
                    {"client_hit_rate", client_rate},
                    {"cache_hit_rate", cache_rate},
                    {"tokens_with_miss", tokens_with_miss},
                    {"reads", reads},
                    {"bytes_read", bytes},
                    {"reads_per_token", static_cast<double>(reads) / n},
                    {"gb_per_token", static_cast<double>(bytes) / 1e9 / n},
                    {"wall_seconds", wall},
                    {"wait_seconds", s1.wait_seconds - s0.wait_seconds},
                    {"slowest_token", slowest_token},
                    {"slowest_token_seconds", slowest},
                    {"other_clients", others},
                    {"reads_pending_at_start", busy}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("replayed  tokens %zu:%zu of %s (%zu tokens x %zu MoE layers) on wasted at %s\n",
              begin, end, o.trace.c_str(), n, moe.size(), o.socket.c_str());
  std::printf("cache     %u slots for %llu records (%.1f%%)\n", slots,
              static_cast<unsigned long long>(records), 100 * share(slots, records));
  std::printf(
      "acquired  %llu records: %llu hits, %llu misses, %.1f%% client hit rate; "
      "%zu of %zu tokens waited\n",
      static_cast<unsigned long long>(acquired), static_cast<unsigned long long>(hits),
      static_cast<unsigned long long>(misses), 100 * client_rate, tokens_with_miss, n);
  std::printf(
      "reads     %llu records, %s: %.2f reads, %.4g GB per token; "
      "%.1f%% cache hit rate (1 - reads / acquired)\n",
      static_cast<unsigned long long>(reads), FormatSize(bytes).c_str(),
      static_cast<double>(reads) / n, static_cast<double>(bytes) / 1e9 / n, 100 * cache_rate);
  std::printf("time      %.3f s, %.2f ms per token, slowest token %zu at %.2f ms\n", wall,
              1e3 * wall / n, slowest_token, 1e3 * slowest);
  if (others)
    std::printf("note      %zu other client(s) attached: the daemon's reads include theirs\n",
                others);
  if (busy)
    std::printf(
        "note      %llu reads were queued or under way when the replay began: "
        "they count as its reads\n",
        static_cast<unsigned long long>(busy));
  return 0;
}

}  // namespace

void AddReplay(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ReplayOptions>();
  auto* cmd = app.add_subcommand(
      "replay", "Drive a running wasted's cache with a routing trace: hit rate, reads per token");
  cmd->add_option("CONTAINER", o->container, "Container directory (the one wasted serves)")
      ->required();
  cmd->add_option("TRACE", o->trace,
                  "Routing trace: one JSON line per token, {\"layers\": [[experts], ...]}")
      ->required();
  o->socket = ClientDaemonSocket();
  cmd->add_option("--socket", o->socket, "wasted's socket")->capture_default_str();
  cmd->add_option("--tokens", o->tokens,
                  "Replay tokens A to B-1 of the trace (A:B, counted from 0; default: all)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o, exit_code] { *exit_code = RunReplay(*o); });
}

}  // namespace waste::cli
