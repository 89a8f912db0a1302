// What the compute subcommands share: opening a container with its expert
// cache, model and tokenizer under a memory budget, and the options for it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/experts/cache.h"
#include "engine/format/container.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "link/attach.h"

namespace waste::cli {

struct EngineOptions {
  std::string container;
  std::string budget;  // empty: this machine's default
  int threads = 0;     // 0: all usable CPUs
  int context = 4096;
  int chunk = 32;
  int readers = 4;
  // Experts hinted per token for the next MoE layer (ModelOptions::lookahead).
  int lookahead = ModelOptions{}.lookahead;
  // Experts routed per token (ModelOptions::experts_per_token); 0: top_k.
  int experts_per_token = 0;
  bool verify = false;  // crc32 of every record read
  std::string isa;      // scalar, avx2, avx512; empty: the best available
  std::string expert_table = "f32";  // f32 or i8 (ModelOptions::expert_table)
  std::string q4_input = "exact";    // exact or i8 (ModelOptions::q4_input)
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

// Adds --budget, --threads, --ctx, --chunk, --readers, --lookahead,
// --experts-per-token, --verify,
// --isa, --expert-table, --socket, --local, --spawn.
void AddEngineFlags(CLI::App* cmd, EngineOptions* o);
// Adds --reattach-wait, for the commands that go through ForwardThroughRestarts.
void AddReattachFlag(CLI::App* cmd, EngineOptions* o);

// What --help says of a client outliving its daemon (run and chat).
inline constexpr const char* kReattachHelp =
    "When wasted restarts in the middle (an upgrade, systemctl restart, a crash), the "
    "conversation, which lives in this process, is kept: the command waits up to "
    "--reattach-wait seconds for a wasted serving the same container on the same socket, "
    "attaches to it and goes on where it was, with the logits it would have had. Another "
    "container there, or none in time, stops it with a message; what it printed stays.";

struct Engine {
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
  uint64_t budget = 0;       // this process's: with a daemon, state and scratch only
  uint64_t cache_slots = 0;  // the cache's, in this process or the daemon
  std::string where;         // "in process" or "wasted at SOCKET"
};

// Opens everything; errors are printed by the caller.
Result<Engine> OpenEngine(const EngineOptions& o);

// e.model->Forward(s, tokens, logits), outliving wasted: attached to a
// daemon (and with o.reattach_wait > 0; with 0 a daemon already gone fails
// the call at once, one going in it fails it), when it has gone away, before the
// call or in it, the model and the link are dropped (their memory was the
// old daemon's), a daemon serving the same container at o.socket is waited
// for (ReattachDaemon, notices on stderr), the model is built again over it,
// and the tokens the session has not run yet are run from where the session
// was (Model::Forward leaves a failed chunk unrun), so the logits are an
// uninterrupted run's. Fails when none serves within the wait, or one
// serves another container: `s` then holds every token run so far, e.model
// is null, and the next call tries again.
Status ForwardThroughRestarts(Engine& e, const EngineOptions& o, Session& s,
                              std::span<const int> tokens, float* logits);

// e.model->ForwardBatch(items), outliving wasted in the same way: a failed
// step moves no session, so after reattaching it runs again whole.
Status StepThroughRestarts(Engine& e, const EngineOptions& o,
                           std::span<const Model::BatchItem> items);

// The prompt: the argument, or a file's contents with "@FILE", or standard input with "-".
Result<std::string> ReadPrompt(const std::string& arg);

}  // namespace waste::cli
