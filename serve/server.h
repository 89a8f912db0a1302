// Server: `waste serve` over an opened engine, its three parts joined: a
// Scheduler stepping the Engine (runtime/engine.h), the ApiServer over the
// scheduler, and the HttpServer in front of it. A request goes HttpServer
// -> ApiServer::Handle -> Scheduler -> Engine::Step -> Model::ForwardBatch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "http/server.h"
#include "runtime/engine.h"
#include "serve/api_server.h"
#include "serve/scheduler.h"

namespace waste::serve {

struct ServerOptions {
  int parallel = 4;                  // SchedulerOptions::parallel
  int queue = 16;                    // SchedulerOptions::queue
  uint64_t keep_bytes = 1ull << 30;  // SchedulerOptions::prefix_cache_bytes
  std::string model_name;  // empty: the container directory's name ("waste" when it has none)
  std::string api_key;     // empty: none needed
};

class Server {
 public:
  // The scheduler (context and chunk: the engine's options) and the API
  // over `engine`, which must outlive the server; no socket yet. Fails when
  // the container has no tokenizer, or no end of turn can be found.
  static Result<std::unique_ptr<Server>> Open(Engine& engine, const ServerOptions& o);
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Starts the HTTP server on `o`'s address (HttpServer::Start's errors).
  Status Listen(const http::HttpOptions& o);
  // The HTTP server, once listening (its address, whether it is loopback).
  const http::HttpServer& http_server() const { return *http_; }
  const std::string& model_name() const { return model_name_; }
  // Stops taking requests, then ends every generation (kCancelled).
  void Stop();

 private:
  Server() = default;

  std::string model_name_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<http::HttpServer> http_;
};

}  // namespace waste::serve
