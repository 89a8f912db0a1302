// waste serve: the OpenAI-compatible HTTP server (serve/api_server.h), one
// more client of wasted: it attaches like waste run, runs its requests in
// batches (serve/scheduler.h) and holds their conversations itself.
#include <csignal>

#include <atomic>
#include <cctype>
#include <thread>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "engine/plan/plan.h"
#include "clients/waste/commands.h"
#include "clients/waste/engine_setup.h"
#include "engine/tokenizer/chat.h"
#include "serve/api_server.h"
#include "http/server.h"
#include "serve/scheduler.h"

namespace waste::cli {
namespace {

struct ServeOptions {
  EngineOptions engine;
  std::string listen = "127.0.0.1:8080";
  int parallel = 4;
  int queue = 16;
  std::string keep = "1G";  // memory for kept conversation states
  std::string api_key_file;
  std::string model_name;  // default: the container directory's name
  int max_connections = 64;
};

// "HOST:PORT", "[V6]:PORT" or ":PORT" (loopback).
Status ParseListen(const std::string& s, std::string* host, uint16_t* port) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos) return Status::Error("--listen " + s + ": expected HOST:PORT");
  std::string h = s.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) h = "127.0.0.1";
  const std::string p = s.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(p) > 65535)
    return Status::Error("--listen " + s + ": the port must be 0-65535");
  *host = h;
  *port = static_cast<uint16_t>(std::stoi(p));
  return Status::Ok();
}

// The key: the file's first line, without surrounding whitespace.
Result<std::string> ReadApiKey(const std::string& path) {
  auto text = ReadSmallFile(path, 4096);
  if (!text.ok()) return text.status();
  std::string k = text->substr(0, text->find('\n'));
  while (!k.empty() && std::isspace(static_cast<unsigned char>(k.back()))) k.pop_back();
  while (!k.empty() && std::isspace(static_cast<unsigned char>(k.front()))) k.erase(0, 1);
  if (k.size() < 8) return Status::Error(path + ": the API key must be at least 8 characters");
  return k;
}

std::atomic<bool> g_stop{false};
extern "C" void OnSignal(int) { g_stop = true; }

int RunServe(const ServeOptions& o) {
  std::string host;
  uint16_t port = 0;
  if (Status st = ParseListen(o.listen, &host, &port); !st.ok()) {
    std::fprintf(stderr, "waste: %s\n", st.message().c_str());
    return 2;
  }
  std::string key;
  if (!o.api_key_file.empty()) {
    auto k = ReadApiKey(o.api_key_file);
    if (!k.ok()) {
      std::fprintf(stderr, "waste: --api-key-file %s\n", k.status().message().c_str());
      return 2;
    }
    key = *k;
  }
  auto keep = ParseSize(o.keep);
  if (!keep.ok()) {
    std::fprintf(stderr, "waste: --keep-states: %s\n", keep.status().message().c_str());
    return 2;
  }
  auto e = OpenEngine(o.engine);
  if (!e.ok()) {
    std::fprintf(stderr, "waste: %s\n", e.status().message().c_str());
    return 1;
  }
  if (!e->tokenizer) {
    std::fprintf(stderr, "waste: serve needs a container with a tokenizer\n");
    return 1;
  }
  const Container& ct = *e->container;
  auto end_ids = EndOfTurnIds(ct, *e->tokenizer);
  if (!end_ids.ok()) {
    std::fprintf(stderr, "waste: %s\n", end_ids.status().message().c_str());
    return 1;
  }
  serve::SchedulerOptions so;
  so.parallel = o.parallel;
  so.queue = o.queue;
  so.context = o.engine.context;
  so.chunk = o.engine.chunk;
  so.prefix_cache_bytes = *keep;
  const ModelConfig& config = ct.config();
  // The scheduler's thread is the only one that runs the model, or builds
  // it again after wasted restarts; `attached` is what /health reads.
  std::atomic<bool> attached{true};
  Engine& engine = *e;
  serve::Scheduler scheduler(
      so, config.vocab,
      [&](std::span<const Model::BatchItem> items) {
        const Status st = StepThroughRestarts(engine, o.engine, items);
        attached = engine.model != nullptr;
        return st;
      },
      [&](int n) { return engine.model->NewSession(n); });
  serve::ApiOptions ao;
  ao.model_name = o.model_name.empty()
                      ? std::filesystem::path(ct.dir()).lexically_normal().filename().string()
                      : o.model_name;
  if (ao.model_name.empty()) ao.model_name = "waste";
  ao.api_key = key;
  ao.context = o.engine.context;
  serve::ApiServer api(ao, *e->tokenizer, ct.chat() ? &*ct.chat() : nullptr, *end_ids, scheduler,
                       [&] { return attached.load(); });
  http::HttpOptions ho;
  ho.host = host;
  ho.port = port;
  ho.max_connections = static_cast<size_t>(o.max_connections);
  // Qualified in full: `http` names the server from here on.
  auto http = waste::http::HttpServer::Start(
      ho, [&](waste::http::Request req, std::shared_ptr<waste::http::Responder> r) {
        api.Handle(std::move(req), std::move(r));
      });
  if (!http.ok()) {
    std::fprintf(stderr, "waste: --listen %s: %s\n", o.listen.c_str(), http.status().message().c_str());
    return 1;
  }
  if (!(*http)->loopback() && key.empty()) {
    std::fprintf(stderr,
                 "waste: --listen %s is not a loopback address: an API key is required there "
                 "(--api-key-file)\n",
                 o.listen.c_str());
    return 2;
  }
  api.set_http(http->get());
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::printf("waste serve: %s on http://%s/ (experts %s; %d at once, context %d)\n",
              ao.model_name.c_str(), (*http)->address().c_str(), e->where.c_str(), o.parallel,
              o.engine.context);
  std::fflush(stdout);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::fprintf(stderr, "waste serve: stopping\n");
  (*http)->Stop();
  scheduler.Stop();
  return 0;
}

}  // namespace

void AddServe(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand(
      "serve",
      "An OpenAI-compatible HTTP server (chat completions, completions, models), batching "
      "its requests");
  cmd->add_option("CONTAINER", o->engine.container, "Container directory")->required();
  cmd->add_option("--listen", o->listen,
                  "HOST:PORT to listen on; a non-loopback address needs --api-key-file")
      ->capture_default_str();
  cmd->add_option("--parallel", o->parallel, "Requests decoding together, in one forward step")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--queue", o->queue, "Requests waiting for a place; more are answered 503")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_option("--keep-states", o->keep,
                  "Memory for conversations' states kept at turn boundaries, so that a follow-up "
                  "turn is not prefilled again (0: none)")
      ->capture_default_str();
  cmd->add_option("--api-key-file", o->api_key_file,
                  "A file whose first line is the key clients send as 'Authorization: Bearer KEY'");
  cmd->add_option("--model-name", o->model_name,
                  "The model's name in the API (default: the container directory's name)");
  cmd->add_option("--max-connections", o->max_connections, "Connections open at once")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  AddEngineFlags(cmd, &o->engine);
  AddReattachFlag(cmd, &o->engine);
  cmd->footer(kReattachHelp);
  cmd->callback([o, exit_code] { *exit_code = RunServe(*o); });
}

}  // namespace waste::cli
