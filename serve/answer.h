// One request's answer while its generation runs, whatever the API: the
// scheduler's callbacks drive it, and it writes the API's objects, whole or
// streamed, to the client. ApiServer (serve/api_server.h) makes one per
// request, of the route's kind (OpenAI's chat and completions answers are in
// serve/openai_answer.h), and hands its generation to the scheduler.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "http/server.h"
#include "serve/openai.h"

namespace waste::serve {

class Answer {
 public:
  virtual ~Answer() = default;
  // On the loop thread, before the generation is submitted: a stream's head
  // and first events (nothing for a whole answer).
  virtual void Start() = 0;
  // On the scheduler's thread, each generated token with the logits it was
  // sampled from ([vocab]). False: the reply is complete (an end of turn or a
  // stop string was seen); the generation then ends.
  virtual bool OnToken(int32_t id, std::span<const float> logits) = 0;
  // The generation ended without error: `length` when it ran out of tokens
  // (max_tokens or the context) before the reply was complete.
  virtual void OnEnd(bool length, const Usage& usage) = 0;
  // It failed, the server is stopping, or the queue was full: the error as
  // the API shapes it, sent whole or as the stream's last event.
  virtual void OnError(const ApiError& e) = 0;
  // Whether the answer streams (its errors then go into the stream).
  virtual bool streaming() const = 0;
};

}  // namespace waste::serve
