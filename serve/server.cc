#include "serve/server.h"

#include <filesystem>

#include "engine/tokenizer/chat.h"

namespace waste::serve {

Result<std::unique_ptr<Server>> Server::Open(Engine& engine, const ServerOptions& o) {
  if (!engine.tokenizer) return Status::Error("serve needs a container with a tokenizer");
  const Container& ct = *engine.container;
  auto end_ids = EndOfTurnIds(engine.chat, ct.config().eos_tokens, *engine.tokenizer);
  if (!end_ids.ok()) return end_ids.status();
  std::unique_ptr<Server> s(new Server());
  SchedulerOptions so;
  so.parallel = o.parallel;
  so.queue = o.queue;
  so.context = engine.options.context;
  so.chunk = engine.model_options.chunk;  // --chunk, or the one the engine planned
  so.prefix_cache_bytes = o.keep_bytes;
  // The scheduler's thread is the only one that runs the model, or builds
  // it again after wasted restarts.
  s->scheduler_ = std::make_unique<Scheduler>(so, ct.config().vocab, engine);
  ApiOptions ao;
  ao.model_name = o.model_name.empty()
                      ? std::filesystem::path(ct.dir()).lexically_normal().filename().string()
                      : o.model_name;
  if (ao.model_name.empty()) ao.model_name = "waste";
  ao.api_key = o.api_key;
  ao.context = engine.options.context;
  s->model_name_ = ao.model_name;
  s->api_ = std::make_unique<ApiServer>(
      ao, *engine.tokenizer, engine.chat ? &*engine.chat : nullptr, *end_ids, *s->scheduler_);
  return s;
}

Server::~Server() {
  Stop();
}

Status Server::Listen(const http::HttpOptions& o) {
  auto started =
      http::HttpServer::Start(o, [this](http::Request req, std::shared_ptr<http::Responder> r) {
        api_->Handle(std::move(req), std::move(r));
      });
  if (!started.ok()) return started.status();
  http_ = std::move(*started);
  api_->set_http(http_.get());
  return Status::Ok();
}

void Server::Stop() {
  if (http_) http_->Stop();
  scheduler_->Stop();
}

}  // namespace waste::serve
