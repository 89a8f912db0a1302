// waste bench (throughput and where the time goes) and waste chat (a REPL).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "clients/waste/commands.h"
#include "clients/waste/engine_flags.h"
#include "engine/model/sampler.h"
#include "engine/model/session_io.h"
#include "engine/plan/plan.h"
#include "engine/tokenizer/chat.h"

namespace waste::cli {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct BenchOptions {
  EngineOptions engine;
  int prompt_tokens = 64;
  int gen_tokens = 32;
  int batch = 1;  // sequences decoding together (Model::ForwardBatch); 1: Model::Forward
  bool json = false;
};

// Bytes this process has read through read(2) and friends so far (rchar).
uint64_t BytesReadByThisProcess() {
  std::ifstream f("/proc/self/io");
  std::string key;
  uint64_t v = 0;
  while (f >> key >> v)
    if (key == "rchar:") return v;
  return 0;
}

// This process's demand hints as wasted classified them (hits, late,
// misses: link/daemon_client.h, DaemonStatus); only when attached.
struct DemandCounts {
  uint64_t hits = 0, late = 0, misses = 0;
};

// The expert source's counters; attached to wasted, the reads are the
// daemon's (all of its clients'), so bench a daemon with no other client.
// The demand counts are this client's own (found by its pid).
ExpertStats ReadCounters(const Engine& e, std::optional<DemandCounts>* demands) {
  ExpertStats s = e.experts ? e.experts->stats() : ExpertStats{};
  demands->reset();
  if (e.daemon) {
    auto d = e.daemon->client->GetStatus();
    if (d.ok()) {
      s.reads = d->reads;
      s.bytes_read = d->bytes_read;
      s.read_busy_seconds = d->read_busy_seconds;
      for (const ClientStatusInfo& c : d->clients)
        if (c.pid == static_cast<uint32_t>(getpid())) *demands = DemandCounts{c.hits, c.late, c.misses};
    }
  }
  return s;
}

int RunBench(const BenchOptions& o) {
  const auto t_open = Clock::now();
  auto e = OpenEngine(o.engine);
  if (!e.ok()) {
    std::fprintf(stderr, "waste: %s\n", e.status().message().c_str());
    return 1;
  }
  const double open_seconds = Since(t_open);
  const uint64_t read_at_open = BytesReadByThisProcess();
  Model& m = *e->model;
  const int V = m.config().vocab;
  // Each sequence's own prompt, so that they route differently.
  auto prompt_of = [&](int q) {
    std::vector<int> p(o.prompt_tokens);
    for (int i = 0; i < o.prompt_tokens; ++i)
      p[i] = static_cast<int>((1 + 7919ull * i + 104729ull * q) % V);
    return p;
  };
  const int B = o.batch;
  std::vector<Session> sessions;
  for (int q = 0; q < B; ++q)
    sessions.push_back(m.NewSession(std::max(o.engine.context, o.prompt_tokens + o.gen_tokens + 1)));
  std::vector<std::vector<float>> logits(B, std::vector<float>(V));
  const StepParts parts_open = m.step_parts();
  const PhaseTimes times_open = m.times();
  const auto t0 = Clock::now();
  for (int q = 0; q < B; ++q) {
    if (Status st = m.Forward(sessions[q], prompt_of(q), logits[q].data()); !st.ok()) {
      std::fprintf(stderr, "waste: %s\n", st.message().c_str());
      return 1;
    }
  }
  const double prefill = Since(t0);
  // Wall-clock time of the first token, so that a script can time it from
  // the moment it started this process (exec, loading, flags included).
  const double first_token_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::optional<DemandCounts> demands0, demands1;
  const ExpertStats before = ReadCounters(*e, &demands0);
  const PhaseTimes pt0 = m.times();
  const StepParts parts0 = m.step_parts();
  const PoolJobs pj0 = m.pool_jobs();
  const LookaheadStats la0 = m.lookahead_stats();
  Sampler greedy({});
  const auto t1 = Clock::now();
  std::vector<int> next(B);
  for (int i = 0; i < o.gen_tokens; ++i) {
    std::vector<Model::BatchItem> items;
    for (int q = 0; q < B; ++q) {
      next[q] = greedy.Sample(logits[q]);
      items.push_back({&sessions[q], std::span<const int>(&next[q], 1), logits[q].data()});
    }
    const Status st = B == 1 ? m.Forward(sessions[0], items[0].tokens, logits[0].data())
                             : m.ForwardBatch(items);
    if (!st.ok()) {
      std::fprintf(stderr, "waste: %s\n", st.message().c_str());
      return 1;
    }
  }
  const double decode = Since(t1);
  const ExpertStats after = ReadCounters(*e, &demands1);
  const PhaseTimes& pt = m.times();
  const StepParts parts1 = m.step_parts();
  const PoolJobs pj = m.pool_jobs();
  const LookaheadStats& la1 = m.lookahead_stats();
  // Decode only, like the expert counters; a ratio over nothing is 0.
  auto ratio = [](uint64_t a, uint64_t b) { return b ? static_cast<double>(a) / b : 0.0; };
  const uint64_t la_hinted = la1.hinted - la0.hinted, la_used = la1.used - la0.used;
  const uint64_t la_demanded = la1.demanded - la0.demanded;
  const double hits = static_cast<double>(after.hits - before.hits);
  const double misses = static_cast<double>(after.misses - before.misses);
  const double n = static_cast<double>(std::max(1, o.gen_tokens)) * B;  // tokens decoded
  nlohmann::json j = {
      {"container", o.engine.container},
      {"experts_from", e->where},
      {"open_seconds", open_seconds},
      {"first_token_seconds", open_seconds + prefill},
      {"first_token_unix_seconds", first_token_unix},
      {"bytes_read_by_open", read_at_open},
      {"threads", m.threads()},
      {"budget", e->budget},
      {"cache_slots", e->cache_slots},
      {"chunk", e->model_options.chunk},
      {"chunk_scratch", e->chunk_scratch},
      {"batch", B},
      {"prefill_tokens", o.prompt_tokens * B},
      {"prefill_tok_s", o.prompt_tokens * B / std::max(prefill, 1e-9)},
      {"decode_tokens", n},
      {"decode_tok_s", n / std::max(decode, 1e-9)},
      {"decode_hit_rate", hits + misses > 0 ? hits / (hits + misses) : 0.0},
      {"lookahead", m.lookahead()},
      {"lookahead_hinted", la_hinted},
      {"lookahead_precision", ratio(la_used, la_hinted)},
      {"lookahead_recall", ratio(la_used, la_demanded)},
      {"decode_gb_read_per_token",
       static_cast<double>(after.bytes_read - before.bytes_read) / 1e9 / n},
      // The read path's throughput while a read was in flight, to hold
      // against the disk's own limit (waste-diskbench).
      {"decode_read_gb_s",
       static_cast<double>(after.bytes_read - before.bytes_read) / 1e9 /
           std::max(after.read_busy_seconds - before.read_busy_seconds, 1e-9)},
      {"decode_wait_share", (pt.expert_wait - pt0.expert_wait) / std::max(decode, 1e-9)},
      {"decode_seconds_per_token",
       {{"expert_io_wait", (pt.expert_wait - pt0.expert_wait) / n},
        {"expert_arithmetic", (pt.experts - pt0.experts) / n},
        {"attention", (pt.attention - pt0.attention) / n},
        {"lookahead", (pt.lookahead - pt0.lookahead) / n},
        {"other", (pt.other - pt0.other) / n},
        {"total", decode / n}}},
      // Barriers (thread-pool jobs) per token: a count, valid on a busy machine.
      {"decode_pool_jobs_per_token",
       {{"attention", static_cast<double>(pj.attention - pj0.attention) / n},
        {"total", static_cast<double>(pj.total - pj0.total) / n}}},
  };
  // The roofline's parts (Model::step_parts) per token, each with the GB of
  // weights it read and their rate; attention_other is the attention's time
  // outside its products.
  const auto parts_json = [](const StepParts& a, const StepParts& b, const PhaseTimes& ta,
                             const PhaseTimes& tb, double tokens) {
    nlohmann::json out = nlohmann::json::object();
    for (int i = 0; i < StepParts::kCount; ++i) {
      const double sec = (b.seconds[i] - a.seconds[i]) / tokens;
      const double gb = static_cast<double>(b.bytes[i] - a.bytes[i]) / 1e9 / tokens;
      out[StepPartName(static_cast<StepPart>(i))] = {
          {"seconds", sec}, {"gb", gb}, {"gb_s", sec > 0 ? gb / sec : 0.0}};
    }
    const int ap = static_cast<int>(StepPart::kAttentionProducts);
    out["attention_other"] = {
        {"seconds", (tb.attention - ta.attention - (b.seconds[ap] - a.seconds[ap])) / tokens}};
    out["expert_io_wait"] = {{"seconds", (tb.expert_wait - ta.expert_wait) / tokens}};
    return out;
  };
  j["decode_parts_per_token"] = parts_json(parts0, parts1, pt0, pt, n);
  j["prefill_parts_per_token"] =
      parts_json(parts_open, parts0, times_open, pt0, std::max(1, o.prompt_tokens * B));
  // Through wasted: the decode's demand hints as the daemon saw them. A late
  // record was asked for ahead (lookahead) but its read had not finished
  // when the layer demanded it; the client's hit rate above counts it as a
  // wait, like a miss.
  std::optional<DemandCounts> demand;
  if (demands0 && demands1)
    demand = DemandCounts{demands1->hits - demands0->hits, demands1->late - demands0->late,
                          demands1->misses - demands0->misses};
  if (demand) {
    const uint64_t all = demand->hits + demand->late + demand->misses;
    j["decode_demands"] = {{"hits", demand->hits},
                           {"late", demand->late},
                           {"misses", demand->misses},
                           {"hit_rate", ratio(demand->hits, all)},
                           {"late_rate", ratio(demand->late, all)},
                           {"miss_rate", ratio(demand->misses, all)}};
  }
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const auto& sp = j["decode_seconds_per_token"];
  if (B > 1) std::printf("batch    %d sequences decoding together; counts and rates are of them all\n", B);
  std::printf("prefill  %d tokens, %.2f tok/s\n", o.prompt_tokens * B,
              j["prefill_tok_s"].get<double>());
  std::printf(
      "decode   %d tokens, %.2f tok/s, hit rate %.1f%% (acquired without waiting), %.3f GB read "
      "per token (%.2f GB/s while reading), %.1f%% of the time waiting for reads\n",
      static_cast<int>(n), j["decode_tok_s"].get<double>(), 100 * j["decode_hit_rate"].get<double>(),
      j["decode_gb_read_per_token"].get<double>(), j["decode_read_gb_s"].get<double>(),
      100 * j["decode_wait_share"].get<double>());
  if (demand) {
    const auto& d = j["decode_demands"];
    std::printf(
        "demands  %llu seen by wasted: %.1f%% hits, %.1f%% late (asked for ahead, still being "
        "read), %.1f%% misses\n",
        static_cast<unsigned long long>(demand->hits + demand->late + demand->misses),
        100 * d["hit_rate"].get<double>(), 100 * d["late_rate"].get<double>(),
        100 * d["miss_rate"].get<double>());
  }
  std::printf(
      "per token  expert I/O wait %.1f ms, expert arithmetic %.1f ms, attention %.1f ms, "
      "lookahead %.1f ms, other %.1f ms (total %.1f ms)\n",
      1e3 * sp["expert_io_wait"].get<double>(), 1e3 * sp["expert_arithmetic"].get<double>(),
      1e3 * sp["attention"].get<double>(), 1e3 * sp["lookahead"].get<double>(),
      1e3 * sp["other"].get<double>(), 1e3 * sp["total"].get<double>());
  std::printf("barriers   %.1f thread-pool jobs per token, %.1f of them in attention\n",
              j["decode_pool_jobs_per_token"]["total"].get<double>(),
              j["decode_pool_jobs_per_token"]["attention"].get<double>());
  if (m.lookahead() > 0)
    std::printf(
        "lookahead  %d per token, %.1f records hinted per token, precision %.1f%%, "
        "recall %.1f%%\n",
        m.lookahead(), la_hinted / n, 100 * j["lookahead_precision"].get<double>(),
        100 * j["lookahead_recall"].get<double>());
  else
    std::printf("lookahead  off\n");
  std::printf("threads %d, budget %s, cache %llu records, experts %s, chunks of %d tokens (%s)\n",
              m.threads(), FormatSize(e->budget).c_str(),
              static_cast<unsigned long long>(e->cache_slots), e->where.c_str(),
              e->model_options.chunk, FormatSize(e->chunk_scratch).c_str());
  std::printf("open     %.3f s (%s read by this process), first token after %.3f s\n",
              open_seconds, FormatSize(read_at_open).c_str(), open_seconds + prefill);
  return 0;
}

struct ChatOptions {
  EngineOptions engine;
  SamplerOptions sampler;
  int max_tokens = 512;
  std::string system;
};

int RunChat(const ChatOptions& o) {
  auto e = OpenEngine(o.engine);
  if (!e.ok()) {
    std::fprintf(stderr, "waste: %s\n", e.status().message().c_str());
    return 1;
  }
  if (!e->tokenizer) {
    std::fprintf(stderr, "waste: chat needs a container with a tokenizer\n");
    return 1;
  }
  // The model may be built again over a new daemon, or be gone with the old
  // one (ForwardThroughRestarts): the shape is the container's.
  const ModelConfig& config = e->container->config();
  const Tokenizer& tok = *e->tokenizer;
  if (!e->chat) {
    std::fprintf(stderr,
                 "waste: chat needs a container with chat.json (its chat markup), or "
                 "--chat-format\n");
    return 1;
  }
  const ChatFormat& chat = *e->chat;
  auto ends = EndOfTurnIds(e->chat, config.eos_tokens, tok);
  if (!ends.ok()) {
    std::fprintf(stderr, "waste: %s\n", ends.status().message().c_str());
    return 1;
  }
  Session s = e->model->NewSession(o.engine.context);
  Sampler sampler(o.sampler);
  std::vector<float> logits(config.vocab);
  // The first turn after a start, /reset or /load: a fresh session's starts
  // with the system prompt (and the template's BOS and default prompt); a
  // loaded one continues a conversation already in context.
  bool fresh = true;
  // The tokens `s` has run, for wasted's prompt states; not known after
  // /load or a failed step, and then nothing is shared until /reset.
  std::vector<int> history;
  bool known = true;
  // /reset and /load need the model; after wasted went away for good they
  // say so (and /save still works: it needs only the container).
  const auto need_model = [&] {
    if (!e->model) std::fprintf(stderr, "waste: %s\n", e->lost.c_str());
    return e->model != nullptr;
  };
  std::fprintf(stderr, "chat: /reset, /stats, /save FILE, /load FILE, /quit\n");
  std::string line;
  while (std::fprintf(stderr, "> "), std::getline(std::cin, line)) {
    if (line == "/quit") break;
    if (line == "/reset") {
      if (!need_model()) continue;
      s = e->model->NewSession(o.engine.context);
      fresh = true;
      history.clear();
      known = true;
      continue;
    }
    if (line == "/stats") {
      const ExpertStats st = e->experts ? e->experts->stats() : ExpertStats{};
      std::fprintf(stderr,
                   "position %d of %d, state %s, experts %llu hit / %llu miss, %.3f GB read\n",
                   s.position, s.max_context, FormatSize(s.state_bytes()).c_str(),
                   static_cast<unsigned long long>(st.hits),
                   static_cast<unsigned long long>(st.misses), st.bytes_read / 1e9);
      continue;
    }
    if (line.rfind("/save ", 0) == 0 || line.rfind("/load ", 0) == 0) {
      const std::string path = line.substr(6);
      if (line[1] == 's') {
        const Status st = SaveSession(*e->container, s, path);
        std::fprintf(stderr, "%s\n", st.ok() ? "saved" : st.message().c_str());
      } else if (need_model()) {
        auto loaded = LoadSession(*e->model, path, s.max_context);
        if (loaded.ok()) {
          s = std::move(*loaded);
          fresh = false;
          known = false;
        }
        std::fprintf(stderr, "%s\n", loaded.ok() ? "loaded" : loaded.status().message().c_str());
      }
      continue;
    }
    std::vector<ChatMessage> turn;
    if (fresh && !o.system.empty()) turn.push_back({"system", o.system});
    turn.push_back({"user", line});
    auto rendered =
        RenderChat(chat, tok, turn, {.add_generation_prompt = true, .continuation = !fresh});
    if (!rendered.ok()) {
      std::fprintf(stderr, "waste: %s\n", rendered.status().message().c_str());
      continue;
    }
    fresh = false;
    std::vector<int> full = history;
    full.insert(full.end(), rendered->begin(), rendered->end());
    // With wasted, the longest state kept for the conversation so far (another
    // chat's, a run's, a server's) stands for the tokens it covers; a turn of
    // kShareMinTokens or more is published once its prompt ran.
    const bool share = known && static_cast<int>(full.size()) >= kShareMinTokens;
    const int found =
        share ? e->FindSharedState(full, static_cast<int>(history.size()), s, logits) : 0;
    if (found > 0) std::fprintf(stderr, "(%d tokens from a state wasted kept)\n", found);
    const size_t ran = found > 0 ? static_cast<size_t>(found) : history.size();
    const std::span<const int> rest = std::span<const int>(full).subspan(ran);
    if (Status st = rest.empty() ? Status::Ok() : ForwardThroughRestarts(*e, s, rest, logits.data());
        !st.ok()) {
      std::fprintf(stderr, "waste: %s\n", st.message().c_str());
      known = false;
      continue;
    }
    history = std::move(full);
    if (share && found < static_cast<int>(history.size()))
      e->PublishSharedState(history, s, logits);
    // The reply's text: harmony's final channel, its analysis not shown; K3's
    // response channel.
    ReplyFilter shown(tok, chat.reply_after, chat.open);
    for (int i = 0; i < o.max_tokens; ++i) {
      const int next = sampler.Sample(logits);
      const int one[1] = {next};
      const bool end = std::find(ends->begin(), ends->end(), next) != ends->end();
      // The reply, its end included, stays in context; an end that is the
      // next turn's own opening (GLM's <|user|>) is left to that turn.
      const std::string_view end_text = tok.TokenBytes(next);
      const bool opens_next = end && !end_text.empty() && chat.user.prefix.rfind(end_text, 0) == 0;
      const Status st =
          opens_next ? Status::Ok() : ForwardThroughRestarts(*e, s, one, logits.data());
      if (!st.ok()) std::fprintf(stderr, "\nwaste: %s\n", st.message().c_str());
      if (st.ok() && !opens_next) history.push_back(next);
      known = known && st.ok();
      if (end || !st.ok()) break;
      if (!shown.Shown(next)) continue;
      const std::string_view piece = tok.TokenBytes(next);
      // A token may have no bytes: its view's data() is then null, which
      // fwrite must not get even for 0 bytes (UBSan: nonnull argument).
      if (!piece.empty()) std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace

void AddBench(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd =
      app.add_subcommand("bench", "Prefill and decode speed, hit rate, where the time goes");
  cmd->add_option("CONTAINER", o->engine.container, "Container directory")->required();
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "Prefill length")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--gen", o->gen_tokens, "Decode steps")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--batch", o->batch,
                  "Sequences decoding together, each step one forward pass of them all "
                  "(as waste serve --parallel runs them); each prefills alone first")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print JSON");
  AddEngineFlags(cmd, &o->engine);
  cmd->callback([o, exit_code] { *exit_code = RunBench(*o); });
}

void AddChat(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ChatOptions>();
  auto* cmd =
      app.add_subcommand("chat", "Talk to the model (REPL with /reset, /stats, /save, /load)");
  cmd->add_option("CONTAINER", o->engine.container, "Container directory")->required();
  cmd->add_option("--system", o->system, "A system message");
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Reply length limit")->capture_default_str();
  cmd->add_option("--temp", o->sampler.temperature, "Temperature (0: greedy)");
  cmd->add_option("--top-k", o->sampler.top_k, "Sample from the k most likely");
  cmd->add_option("--top-p", o->sampler.top_p, "Nucleus sampling threshold");
  cmd->add_option("--seed", o->sampler.seed, "Sampling seed");
  AddEngineFlags(cmd, &o->engine);
  AddChatFormatFlag(cmd, &o->engine);
  AddReattachFlag(cmd, &o->engine);
  cmd->footer(std::string(kReattachHelp) +
              " A chat that could not attach again keeps its conversation: /save FILE writes "
              "it, and the next line tries to attach again.");
  cmd->callback([o, exit_code] { *exit_code = RunChat(*o); });
}

}  // namespace waste::cli
