#include "engine/format/chat.h"

#include <utility>

#include <nlohmann/json.hpp>

#include "engine/format/container.h"

namespace waste {
namespace {

using nlohmann::json;

const char kWhere[] = "chat.json: ";

Status ReadRole(const json& doc, const char* key, ChatRole* out) {
  const auto it = doc.find(key);
  if (it == doc.end()) return Status::Error(std::string(kWhere) + "\"" + key + "\" is missing");
  const json& v = *it;
  if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_string())
    return Status::Error(std::string(kWhere) + "\"" + key + "\" must be [prefix, suffix]");
  out->prefix = v[0].get<std::string>();
  out->suffix = v[1].get<std::string>();
  return Status::Ok();
}

}  // namespace

json ChatFormat::ToJson() const {
  json j = {{"version", kVersion},
            {"bos", bos},
            {"system", {system.prefix, system.suffix}},
            {"user", {user.prefix, user.suffix}},
            {"assistant", {assistant.prefix, assistant.suffix}},
            {"open", open},
            {"default_system", default_system},
            {"system_first", system_first},
            {"end_of_turn", end_of_turn}};
  // The later keys only when set: the chat.json of the older families is as before.
  if (leading_system_only) j["leading_system_only"] = true;
  if (last_reply) j["last_reply"] = {last_reply->prefix, last_reply->suffix};
  if (assistant_text_stripped) j["assistant_text_stripped"] = true;
  if (!reply_after.empty()) j["reply_after"] = reply_after;
  if (xtml) j["xtml"] = true;
  if (!family.empty()) j["family"] = family;
  return j;
}

ChatFormat ChatFormat::Kimi() {
  ChatFormat f;
  f.family = kFamilyKimiK2;
  f.system = {"<|im_system|>system<|im_middle|>", "<|im_end|>"};
  f.user = {"<|im_user|>user<|im_middle|>", "<|im_end|>"};
  f.assistant = {"<|im_assistant|>assistant<|im_middle|>", "<|im_end|>"};
  f.open = f.assistant.prefix;
  f.default_system = "You are a helpful assistant";
  f.end_of_turn = {"<|im_end|>"};
  return f;
}

ChatFormat ChatFormat::Deepseek(bool system_first) {
  const std::string eos =
      "<\xEF\xBD\x9C"
      "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
  ChatFormat f;
  f.bos =
      "<\xEF\xBD\x9C"
      "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
  f.user = {"<\xEF\xBD\x9CUser\xEF\xBD\x9C>", ""};
  f.assistant = {
      "<\xEF\xBD\x9C"
      "Assistant\xEF\xBD\x9C>",
      eos};
  f.open = f.assistant.prefix;
  f.system_first = system_first;
  f.end_of_turn = {eos};
  f.family = system_first ? kFamilyDeepseekV3 : kFamilyDemo;
  return f;
}

ChatFormat ChatFormat::DeepseekV31(bool thinking) {
  ChatFormat f = Deepseek(true);
  f.family = kFamilyDeepseekV31;
  f.open = f.assistant.prefix + (thinking ? "<think>" : "</think>");
  f.assistant.prefix += "</think>";
  return f;
}

ChatFormat ChatFormat::Qwen3(bool hybrid, bool thinking) {
  ChatFormat f;
  f.family = kFamilyQwen3;
  f.system = {"<|im_start|>system\n", "<|im_end|>\n"};
  f.user = {"<|im_start|>user\n", "<|im_end|>\n"};
  f.assistant = {"<|im_start|>assistant\n", "<|im_end|>\n"};
  f.open = f.assistant.prefix;
  if (hybrid) {
    const std::string empty_think = "<think>\n\n</think>\n\n";
    if (!thinking) f.open += empty_think;
    f.last_reply = ChatRole{f.assistant.prefix + empty_think, f.assistant.suffix};
  }
  f.end_of_turn = {"<|im_end|>"};
  return f;
}

ChatFormat ChatFormat::Qwen35(bool thinking) {
  ChatFormat f = Qwen3(false);
  f.family = kFamilyQwen35;
  f.open += thinking ? "<think>\n" : "<think>\n\n</think>\n\n";
  return f;
}

ChatFormat ChatFormat::Glm45(bool thinking) {
  ChatFormat f;
  f.family = kFamilyGlm45;
  f.bos = "[gMASK]<sop>";
  f.system = {"<|system|>\n", ""};
  f.user = {"<|user|>\n", thinking ? "" : "/nothink"};
  f.assistant = {"<|assistant|>\n<think></think>", ""};
  f.assistant_text_stripped = true;
  f.open = thinking ? "<|assistant|>" : f.assistant.prefix;
  f.end_of_turn = {"<|user|>", "<|observation|>", "<|endoftext|>"};
  return f;
}

ChatFormat ChatFormat::Harmony(std::string_view reasoning_effort) {
  ChatFormat f;
  f.family = kFamilyHarmony;
  f.bos =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: {date}\n\nReasoning: " +
      std::string(reasoning_effort) +
      "\n\n"
      "# Valid channels: analysis, commentary, final. Channel must be included for every "
      "message.<|end|>";
  f.system = {"<|start|>developer<|message|># Instructions\n\n", "\n\n<|end|>"};
  f.leading_system_only = true;
  f.user = {"<|start|>user<|message|>", "<|end|>"};
  f.assistant = {"<|start|>assistant<|channel|>final<|message|>", "<|end|>"};
  f.last_reply = ChatRole{f.assistant.prefix, "<|return|>"};
  f.open = "<|start|>assistant";
  f.reply_after = "<|channel|>final<|message|>";
  f.end_of_turn = {"<|return|>", "<|call|>"};
  return f;
}

ChatFormat ChatFormat::Xtml(bool thinking) {
  const std::string open = kXtmlOpen, close = kXtmlClose, sep = kXtmlSep;
  const std::string end = close + "message" + sep + kXtmlEndOfMessage;
  const auto message = [&](const char* role) {
    return open + "message role=\"" + role + "\"" + sep;
  };
  ChatFormat f;
  f.family = kFamilyXtml;
  f.system = {message("system"), end};
  f.user = {message("user"), end};
  const std::string response = open + "response" + sep;
  const std::string think = open + "think" + sep;
  f.assistant = {message("assistant") + (thinking ? think + close + "think" + sep : "") + response,
                 close + "response" + sep + end};
  f.open = message("assistant") + (thinking ? think : response);
  f.reply_after = response;
  f.end_of_turn = {kXtmlEndOfMessage};
  f.xtml = true;
  return f;
}

Result<ChatFormat> WithThinking(const ChatFormat& stored, std::optional<bool> thinking,
                                std::string_view reasoning_effort) {
  const std::string& family = stored.family;
  if (!reasoning_effort.empty() && family != kFamilyHarmony)
    return Status::Error("reasoning_effort: this model's chat format (" +
                         (family.empty() ? std::string("unnamed") : family) +
                         ") has no reasoning effort; only GPT-OSS's harmony has");
  if (!reasoning_effort.empty() && reasoning_effort != "low" && reasoning_effort != "medium" &&
      reasoning_effort != "high")
    return Status::Error("reasoning_effort: must be low, medium or high");
  if (family == kFamilyHarmony) {
    if (thinking == false)
      return Status::Error(
          "thinking: GPT-OSS always reasons (its analysis channel) and cannot "
          "be switched off; lower reasoning_effort instead");
    return reasoning_effort.empty() ? stored : ChatFormat::Harmony(reasoning_effort);
  }
  if (!thinking) return stored;
  // Qwen3's hybrid template has the switch (its chat.json has the think
  // block of a last reply); Instruct-2507's has no think blocks at all.
  if (family == kFamilyQwen3 && stored.last_reply) return ChatFormat::Qwen3(true, *thinking);
  if (family == kFamilyQwen35) return ChatFormat::Qwen35(*thinking);
  if (family == kFamilyGlm45) return ChatFormat::Glm45(*thinking);
  if (family == kFamilyDeepseekV31) return ChatFormat::DeepseekV31(*thinking);
  if (family == kFamilyXtml) return ChatFormat::Xtml(*thinking);
  // A model that never thinks is asked for what it does.
  if (!*thinking) return stored;
  return Status::Error("thinking: this model's chat template (" +
                       (family.empty() ? std::string("unnamed") : family) +
                       ") cannot switch thinking on");
}

Result<ChatFormat> ParseChat(std::string_view text) {
  auto doc = ParseJson(text, "chat.json");
  if (!doc.ok()) return doc.status();
  if (!doc->is_object()) return Status::Error("chat.json: not an object");
  ChatFormat f;
  for (const char* role : {"system", "user", "assistant"}) {
    ChatRole* r = role[0] == 's' ? &f.system : role[0] == 'u' ? &f.user : &f.assistant;
    if (doc->contains(role)) WASTE_RETURN_IF_ERROR(ReadRole(*doc, role, r));
  }
  if (auto open = doc->find("open"); open != doc->end() && !open->is_string())
    return Status::Error("chat.json: \"open\" must be a string");
  int64_t version = 0;
  WASTE_RETURN_IF_ERROR(JsonInt(*doc, kWhere, "version", 0, 1 << 20, &version));
  if (version == 0) {
    // An older waste convert's or synth's chat.json: the roles' markup and
    // "open", nothing else. Read as it rendered then (no bos, no default
    // system turn, a role it left out as no markup); the reply ends at the
    // assistant's suffix (and the model's eos_token, EndOfTurnIds). Convert
    // again for the released template's layout.
    WASTE_RETURN_IF_ERROR(JsonString(*doc, kWhere, "open", &f.open));
    if (!f.assistant.suffix.empty()) f.end_of_turn = {f.assistant.suffix};
    return f;
  }
  if (version != ChatFormat::kVersion)
    return Status::Error("chat.json: version " + std::to_string(version) + " is not the " +
                         std::to_string(ChatFormat::kVersion) + " this waste reads");
  for (const char* role : {"system", "user", "assistant"})
    if (!doc->contains(role))
      return Status::Error(std::string(kWhere) + "\"" + role + "\" is missing");
  WASTE_RETURN_IF_ERROR(JsonString(*doc, kWhere, "open", &f.open));
  WASTE_RETURN_IF_ERROR(JsonString(*doc, kWhere, "bos", &f.bos));
  WASTE_RETURN_IF_ERROR(JsonString(*doc, kWhere, "default_system", &f.default_system));
  WASTE_RETURN_IF_ERROR(JsonBool(*doc, kWhere, "system_first", &f.system_first));
  const auto eot = doc->find("end_of_turn");
  // Empty when the markup has no end of its own (a reply then ends at the
  // model's eos_token alone: EndOfTurnIds).
  if (eot == doc->end() || !eot->is_array() || eot->size() > 16)
    return Status::Error("chat.json: \"end_of_turn\" must be a list of at most 16 strings");
  for (const json& e : *eot) {
    if (!e.is_string() || e.get_ref<const std::string&>().empty())
      return Status::Error("chat.json: \"end_of_turn\" holds something not a non-empty string");
    f.end_of_turn.push_back(e.get<std::string>());
  }
  for (auto [key, flag] : {std::pair{"leading_system_only", &f.leading_system_only},
                           std::pair{"assistant_text_stripped", &f.assistant_text_stripped},
                           std::pair{"xtml", &f.xtml}})
    if (doc->contains(key)) WASTE_RETURN_IF_ERROR(JsonBool(*doc, kWhere, key, flag));
  if (doc->contains("last_reply")) {
    ChatRole last;
    WASTE_RETURN_IF_ERROR(ReadRole(*doc, "last_reply", &last));
    f.last_reply = last;
  }
  if (doc->contains("reply_after"))
    WASTE_RETURN_IF_ERROR(JsonString(*doc, kWhere, "reply_after", &f.reply_after));
  if (doc->contains("family")) {
    WASTE_RETURN_IF_ERROR(JsonString(*doc, kWhere, "family", &f.family));
    bool known = false;
    for (const char* name :
         {kFamilyKimiK2, kFamilyDeepseekV3, kFamilyDeepseekV31, kFamilyDemo, kFamilyQwen3,
          kFamilyQwen35, kFamilyGlm45, kFamilyHarmony, kFamilyXtml})
      known = known || f.family == name;
    if (!known)
      return Status::Error("chat.json: \"family\" \"" + f.family.substr(0, 40) +
                           "\" is not one this waste knows");
  }
  return f;
}

}  // namespace waste
