#include "runtime/engine.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <sys/mman.h>
#include <unistd.h>

#include "engine/model/session_io.h"
#include "engine/plan/plan.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "link/spawn.h"

namespace waste {

namespace {

// The smallest in-process cache the lookahead runs with. A layer has at most
// `prefetch` (16) demand hints and 16 lookahead hints outstanding; twice that
// leaves room for reads of earlier layers still in flight.
constexpr uint64_t kLookaheadMinSlots = 64;

// Connects to wasted, starting one first with --spawn. A null link (and no
// error) means: run in this process.
Result<std::unique_ptr<DaemonLink>> MaybeAttach(const EngineOptions& o, const Container& c) {
  if (o.local) return std::unique_ptr<DaemonLink>();
  ConnectFailure why;
  auto client = DaemonClient::Connect(o.socket, &why);
  if (!client.ok() && why == ConnectFailure::kNotListening && o.spawn) {
    std::vector<std::string> extra;
    if (!o.budget.empty()) extra = {"--budget", o.budget};
    if (o.verify) extra.push_back("--verify-crc");
    WASTE_RETURN_IF_ERROR(SpawnDaemon(c.dir(), o.socket, o.spawn_idle_exit, extra));
    client = DaemonClient::Connect(o.socket, &why);
  }
  if (!client.ok()) {
    if (why != ConnectFailure::kNotListening) return client.status();
    std::cerr << "waste: no wasted is listening on " << o.socket
              << "; running in this process (--spawn starts a daemon, --local skips this check)\n";
    return std::unique_ptr<DaemonLink>();
  }
  return AttachDaemon(std::move(*client), o.socket, c);
}

Result<std::unique_ptr<Model>> LoadModel(const Container& c, const Engine& e,
                                         const ModelOptions& mo) {
  if (!e.daemon) return Model::Load(c, e.experts, mo);
  // The trunk is the daemon's segment: nothing of it is read from disk here.
  auto trunk = Trunk::Over(c, e.daemon->trunk.data(), e.daemon->trunk.size());
  if (!trunk.ok()) return trunk.status().Prefixed("wasted's trunk segment");
  return Model::Load(c, e.experts, mo, std::move(*trunk));
}

}  // namespace

Result<Engine> OpenEngine(const EngineOptions& o) {
  Engine e;
  e.options = o;
  auto ct = Container::Open(o.container);
  if (!ct.ok()) return ct.status().Prefixed(o.container);
  e.container = std::make_unique<Container>(std::move(*ct));
  const Container& c = *e.container;
  if (c.has_tokenizer()) {
    auto t = Tokenizer::Load(c.dir());
    if (!t.ok()) return t.status();
    e.tokenizer = std::move(*t);
  }
  e.chat = c.chat();
  if (!o.chat_format.empty()) {
    if (!e.tokenizer) return Status::Error("--chat-format: the container has no tokenizer");
    auto chat = ChatFormatOfFamily(o.chat_format, *e.tokenizer);
    if (!chat.ok()) return chat.status().Prefixed("--chat-format");
    e.chat = std::move(*chat);
  }

  const MemoryPlan plan = PlanMemory(c.manifest(), o.context);
  if (c.config().n_moe_layers() > 0) {
    auto link = MaybeAttach(o, c);
    if (!link.ok()) return link.status();
    e.daemon = std::move(*link);
  }
  if (e.daemon) {
    // The daemon holds trunk and cache; this process holds its own state.
    e.budget = plan.client_state + plan.scratch;
    e.cache_slots = e.daemon->attachment.model.slots;
    e.experts = e.daemon->source.get();
    e.where = "wasted at " + e.daemon->socket;
  } else if (o.budget.empty()) {
    auto b = DefaultBudget(plan, ProcessMemoryLimit());
    if (!b.ok()) return b.status();
    e.budget = *b;
  } else {
    auto b = ParseSize(o.budget);
    if (!b.ok()) return b.status().Prefixed("--budget");
    e.budget = *b;
  }
  // In one process the budget holds the trunk, the state, the scratch, the
  // prefill chunk's work memory and the cache; what the daemon would add is
  // not spent here.
  const uint64_t fixed = plan.trunk + plan.client_state + plan.scratch;
  const uint64_t records = uint64_t(c.config().n_experts) * c.config().n_moe_layers();
  const uint64_t per_token = ChunkBytesPerToken(c.manifest());
  const bool in_process = !e.daemon && records > 0;
  // Whether every record fits in the cache with the short chunk's memory spent.
  bool fit = true;
  if (in_process) {
    const uint64_t short_fixed = fixed + kShortChunk * per_token;
    fit = e.budget >= short_fixed && (e.budget - short_fixed) / c.record_bytes() >= records;
  } else if (e.daemon) {
    fit = e.cache_slots >= records;
  }
  int chunk = o.chunk;
  if (chunk == 0) {
    // The long chunk's memory comes out of the cache in one process, out of
    // what this process may use beside a daemon.
    const uint64_t room = in_process ? (e.budget > fixed ? e.budget - fixed : 0)
                                     : ProcessMemoryLimit().bytes;
    chunk = PlanChunk(c.manifest(), fit, ChunkScratchCap(room), o.context);
  }
  e.chunk_scratch = static_cast<uint64_t>(chunk) * per_token;
  if (e.daemon) e.budget += e.chunk_scratch;
  if (in_process) {
    if (e.budget < fixed + e.chunk_scratch + c.record_bytes())
      return Status::Error("--budget " + FormatSize(e.budget) +
                           " leaves no room for one expert record (trunk " +
                           FormatSize(plan.trunk) + ", state " + FormatSize(plan.client_state) +
                           ", scratch " + FormatSize(plan.scratch) + ", chunks of " +
                           std::to_string(chunk) + " tokens " + FormatSize(e.chunk_scratch) +
                           ")");
    e.cache_slots =
        std::min<uint64_t>(records, (e.budget - fixed - e.chunk_scratch) / c.record_bytes());
    CacheOptions co;
    co.slots = e.cache_slots;
    co.readers = o.readers;
    co.verify_crc = o.verify;
    auto cache = ExpertCache::Create(c, co);
    if (!cache.ok()) return cache.status();
    e.cache = std::move(*cache);
    e.experts = e.cache.get();
  }
  if (e.where.empty()) e.where = "in process";
  ModelOptions mo;
  mo.threads = o.threads;
  mo.chunk = chunk;
  mo.lookahead = o.lookahead;
  mo.experts_per_token = o.experts_per_token;
  if (e.cache && mo.lookahead > 0 && e.cache_slots < std::min(records, kLookaheadMinSlots)) {
    // In a cache this small a layer's lookahead reads take the slots its
    // own demands need next, and each then waits for a read to finish only
    // to evict it (not in one that holds every record: each keeps its slot).
    std::cerr << "waste: lookahead off: an in-process cache of " << e.cache_slots
              << " records is below the " << kLookaheadMinSlots << " it needs\n";
    mo.lookahead = 0;
  }
  mo.on_route = o.on_route;
  if (o.isa == "scalar")
    mo.isa = kernels::Isa::kScalar;
  else if (o.isa == "avx2")
    mo.isa = kernels::Isa::kAvx2;
  else if (o.isa == "avx512")
    mo.isa = kernels::Isa::kAvx512;
  else if (o.isa == "amx")
    mo.isa = kernels::Isa::kAmx;
  else if (!o.isa.empty())  // the flags check the names; a caller of the library may not
    return Status::Error("--isa " + o.isa + ": not one of scalar, avx2, avx512, amx");
  if (!o.isa.empty()) {
    const auto avail = kernels::AvailableIsas();
    if (std::find(avail.begin(), avail.end(), mo.isa) == avail.end())
      return Status::Error("--isa " + o.isa + " is not supported by this CPU");
  }
  if (o.expert_table != "f32" && o.expert_table != "i8")
    return Status::Error("--expert-table " + o.expert_table + ": not f32 or i8");
  if (o.q4_input != "exact" && o.q4_input != "i8")
    return Status::Error("--q4-input " + o.q4_input + ": not exact or i8");
  mo.expert_table = o.expert_table == "i8" ? kernels::VqTable::kI8 : kernels::VqTable::kF32;
  mo.q4_input = o.q4_input == "i8" ? kernels::Q4Input::kInt8 : kernels::Q4Input::kExact;
  e.model_options = mo;
  auto m = LoadModel(c, e, mo);
  if (!m.ok()) return m.status();
  e.model = std::move(*m);
  return e;
}

namespace {

// Drops everything built over the daemon that went away (`why`): the model
// (its trunk is the old segment) and then the link, so that their memory is
// given back before a new daemon takes its own.
void Detach(Engine& e, const Status& why) {
  e.lost = why.message();
  e.model.reset();
  e.experts = nullptr;
  e.daemon.reset();
}

Status Reattach(Engine& e) {
  const EngineOptions& o = e.options;
  std::fprintf(stderr, "\nwaste: %s; waiting up to %g s for wasted to serve %s at %s again\n",
               e.lost.c_str(), o.reattach_wait, e.container->dir().c_str(), o.socket.c_str());
  auto link = ReattachDaemon(o.socket, *e.container, o.reattach_wait, e.lost);
  if (!link.ok())
    return Status::Error(link.status().message() + " (--reattach-wait sets how long to wait)");
  e.daemon = std::move(*link);
  e.experts = e.daemon->source.get();
  auto m = LoadModel(*e.container, e, e.model_options);
  if (!m.ok()) {
    e.experts = nullptr;
    e.daemon.reset();
    return m.status();
  }
  e.model = std::move(*m);
  e.lost.clear();
  std::fprintf(stderr, "waste: attached to wasted at %s again; going on\n", o.socket.c_str());
  return Status::Ok();
}

// `run` on e.model, outliving wasted (ForwardThroughRestarts says how); `run`
// must leave what it has not done undone, so that calling it again goes on.
Status RunThroughRestarts(Engine& e, const std::function<Status(Model&)>& run) {
  if (e.model && !e.daemon) return run(*e.model);
  if (e.model && e.options.reattach_wait <= 0) {
    // Not waiting: a daemon already gone fails the call before it starts
    // (a forward pass whose records are all in the old mappings would not see it).
    WASTE_RETURN_IF_ERROR(e.daemon->Health());
    return run(*e.model);
  }
  for (;;) {
    if (!e.model) WASTE_RETURN_IF_ERROR(Reattach(e));
    Status health = e.daemon->Health();
    if (health.ok()) {
      const Status st = run(*e.model);
      if (st.ok()) return st;
      health = e.daemon->Health();
      if (health.ok()) return st;  // a failure of its own, not the daemon's going
    }
    Detach(e, health);
  }
}

}  // namespace

Status ForwardThroughRestarts(Engine& e, Session& s, std::span<const int> tokens, float* logits) {
  return RunThroughRestarts(e, [&](Model& m) {
    const int before = s.position;
    const Status st = m.Forward(s, tokens, logits);
    tokens = tokens.subspan(static_cast<size_t>(s.position - before));  // the chunks not run
    return st;
  });
}

Status StepThroughRestarts(Engine& e, std::span<const Model::BatchItem> items) {
  return RunThroughRestarts(e, [&](Model& m) { return m.ForwardBatch(items); });
}

Status Engine::Step(std::span<const Model::BatchItem> items) {
  return StepThroughRestarts(*this, items);
}

Result<Session> Engine::NewSession(int max_context) {
  if (!model) WASTE_RETURN_IF_ERROR(Reattach(*this));
  return model->NewSession(max_context);
}

int Engine::FindSharedState(std::span<const int> tokens, int longer_than, Session& to,
                            std::span<float> logits) {
  if (!daemon || !model) return 0;
  const std::vector<int32_t> ids(tokens.begin(), tokens.end());
  auto found = daemon->client->FindState(ids, ModelFingerprint(*container));
  if (!found.ok() || static_cast<int>(found->matched) <= longer_than) return 0;
  auto bytes = found->Read();
  if (!bytes.ok()) {
    std::cerr << "waste: a prompt state from wasted: " << bytes.status().message()
              << "; the prompt is run instead\n";
    return 0;
  }
  auto state = UnpackPromptState(*bytes, ModelFingerprint(*container),
                                 static_cast<int>(found->matched), static_cast<int>(logits.size()));
  Status st = state.ok() ? RestoreSnapshot(state->state, to) : state.status();
  if (!st.ok()) {
    std::cerr << "waste: a prompt state from wasted refused: " << st.message()
              << "; the prompt is run instead\n";
    return 0;
  }
  std::copy(state->logits.begin(), state->logits.end(), logits.begin());
  return static_cast<int>(found->matched);
}

void Engine::PublishSharedState(std::span<const int> tokens, const Session& s,
                                std::span<const float> logits) {
  if (!daemon) return;
  const std::vector<uint8_t> bytes =
      PackPromptState(ModelFingerprint(*container), TakeSnapshot(s), logits);
  // The bytes travel as a memfd: a message could not hold hundreds of MB.
  const int fd = memfd_create("waste-prompt-state", MFD_CLOEXEC);
  bool written = fd >= 0;
  for (size_t done = 0; written && done < bytes.size();) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    written = n > 0;
    if (written) done += static_cast<size_t>(n);
  }
  const std::vector<int32_t> ids(tokens.begin(), tokens.end());
  const Status st = written ? daemon->client->PublishState(ids, ModelFingerprint(*container), fd,
                                                           bytes.size())
                            : Status::Error("cannot write a memfd");
  if (fd >= 0) close(fd);
  // Not kept costs a prefill later, nothing now: said once, not failed.
  if (!st.ok() && !share_refusal_said)
    std::cerr << "waste: a prompt state was not shared: " << st.message() << "\n";
  share_refusal_said = share_refusal_said || !st.ok();
}

}  // namespace waste
