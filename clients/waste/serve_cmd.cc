// waste serve: the OpenAI-compatible HTTP server (serve/server.h), one more
// client of wasted: it opens the engine like waste run, and serve/ runs its
// requests in batches and holds their conversations itself. Here: the flags,
// the messages and the wait for SIGINT or SIGTERM.
#include <csignal>

#include <atomic>
#include <cctype>
#include <thread>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "clients/waste/commands.h"
#include "clients/waste/engine_flags.h"
#include "engine/plan/plan.h"
#include "serve/server.h"

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
  serve::ServerOptions so;
  so.parallel = o.parallel;
  so.queue = o.queue;
  so.keep_bytes = *keep;
  so.model_name = o.model_name;
  so.api_key = key;
  auto server = serve::Server::Open(*e, so);
  if (!server.ok()) {
    std::fprintf(stderr, "waste: %s\n", server.status().message().c_str());
    return 1;
  }
  http::HttpOptions ho;
  ho.host = host;
  ho.port = port;
  ho.max_connections = static_cast<size_t>(o.max_connections);
  if (Status st = (*server)->Listen(ho); !st.ok()) {
    std::fprintf(stderr, "waste: --listen %s: %s\n", o.listen.c_str(), st.message().c_str());
    return 1;
  }
  const http::HttpServer& http = (*server)->http_server();
  if (!http.loopback() && key.empty()) {
    std::fprintf(stderr,
                 "waste: --listen %s is not a loopback address: an API key is required there "
                 "(--api-key-file)\n",
                 o.listen.c_str());
    return 2;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::printf("waste serve: %s on http://%s/ (experts %s; %d at once, context %d)\n",
              (*server)->model_name().c_str(), http.address().c_str(), e->where.c_str(),
              o.parallel, o.engine.context);
  std::fflush(stdout);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::fprintf(stderr, "waste serve: stopping\n");
  (*server)->Stop();
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
  cmd->add_option("--max-connections", o->max_connections,
                  "Connections open at once; a new one closes the longest idle, or is answered 503 "
                  "when none is idle")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  AddEngineFlags(cmd, &o->engine);
  AddChatFormatFlag(cmd, &o->engine);
  AddReattachFlag(cmd, &o->engine);
  cmd->footer(kReattachHelp);
  cmd->callback([o, exit_code] { *exit_code = RunServe(*o); });
}

}  // namespace waste::cli
