// Fuzz target: the bodies of POST /v1/chat/completions and /v1/completions
// (serve/openai.cc, ParseChatRequest and ParseCompletionRequest), bytes from
// anyone who can reach waste serve. Any bytes give a request inside every
// range the API promises, or an error whose JSON dumps; never a throw. A
// chat request is then laid out by every family's format (tools, tool calls
// and results, thinking: engine/tokenizer/chat_tools.h), or refused.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/openai.h"

namespace {

void Check(const waste::serve::Sampling& s) {
  const bool ok = (!s.max_tokens || *s.max_tokens >= 1) && s.temperature >= 0 &&
                  s.temperature <= 2 && s.top_p > 0 && s.top_p <= 1 && s.top_k >= 0 &&
                  s.stop.size() <= 4 && s.top_logprobs >= 0 && s.top_logprobs <= 20 &&
                  (!s.include_usage || s.stream) && s.presence_penalty >= -2 &&
                  s.presence_penalty <= 2 && s.frequency_penalty >= -2 &&
                  s.frequency_penalty <= 2 && s.logit_bias.size() <= 300;
  if (!ok) std::abort();
  for (size_t i = 0; i < s.logit_bias.size(); ++i) {
    const auto [id, bias] = s.logit_bias[i];
    if (id < 0 || !(bias >= -100 && bias <= 100) || (i > 0 && s.logit_bias[i - 1].first >= id))
      std::abort();
  }
}

void Check(const waste::serve::ApiError& e) {
  if (e.status < 400 || e.status > 599) std::abort();
  (void)e.ToJson().dump();  // strict: throws on invalid UTF-8
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  waste::serve::ChatRequest chat;
  if (auto e = waste::serve::ParseChatRequest(body, &chat)) {
    Check(*e);
  } else {
    Check(chat.sampling);
    if (chat.messages.empty()) std::abort();
    for (const auto& m : chat.messages) {
      if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
        std::abort();
      // A result names the call it answers, and its function.
      if (m.role == "tool" && (m.tool_call_id.empty() || m.name.empty())) std::abort();
    }
    // Every family lays the request out, or refuses it by name; never a throw.
    for (const waste::ChatFormat& f :
         {waste::ChatFormat::Kimi(), waste::ChatFormat::Deepseek(true),
          waste::ChatFormat::Deepseek(false), waste::ChatFormat::DeepseekV31(),
          waste::ChatFormat::Qwen3(true), waste::ChatFormat::Qwen3(false),
          waste::ChatFormat::Glm45(), waste::ChatFormat::Harmony(),
          waste::ChatFormat::Xtml(true)}) {
      auto pieces = waste::ChatPieces(f, chat.messages,
                                      {.date = "2026-01-15",
                                       .tools = chat.tools,
                                       .thinking = chat.thinking,
                                       .reasoning_effort = chat.reasoning_effort});
      if (!pieces.ok() && pieces.status().message().empty()) std::abort();
    }
  }
  waste::serve::CompletionRequest completion;
  if (auto e = waste::serve::ParseCompletionRequest(body, &completion)) {
    Check(*e);
  } else {
    Check(completion.sampling);
  }
  return 0;
}
