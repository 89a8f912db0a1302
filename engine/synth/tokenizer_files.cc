#include "engine/synth/tokenizer_files.h"

#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/format/chat.h"

#include "engine/tokenizer/base64.h"

namespace waste {
namespace {

// Words whose every prefix becomes a token, so each merge joins two tokens
// that already exist (as byte-pair encoding requires).
constexpr std::string_view kWords[] = {
    " the",    " and",   " to",     " of",   " in",    " is",    " that",   " it",
    " for",    " on",    " with",   " as",   " was",   " he",    " be",     " at",
    " by",     " this",  " have",   " from", " hello", " world", " model",  " token",
    " expert", " cache", " memory", " disk", " read",  " write", " daemon", " waste",
    "the",     "ing",    "tion",    "ed",    "er",     "re",     "es",      "Hello",
    "The",     "int",    "return",  " {",    " }",     "();",    "    ",    "\n\n",
};

struct Special {
  std::string_view text;
  int real_id = 0;  // id in the released vocabulary (Kimi's, K3's); 0: not placed there
};
constexpr Special kKimiSpecials[] = {
    {"[BOS]", 163584},
    {"[EOS]", 163585},
    {"<|im_end|>", 163586},
    {"<|im_user|>", 163587},
    {"<|im_assistant|>", 163588},
    {"<|im_system|>", 163594},
    {"<|im_middle|>", 163601},
};
// K3's tokenizer_config.json gives Kimi's ids 163586-163589 to XTML's
// markers (WARP's examples/README.md, "chat-k3.json") and 163602-163605 to
// the media tokens (WARP's docs/K3.md, "Images in the token stream").
constexpr Special kK3Specials[] = {
    {"[BOS]", 163584},
    {"[EOS]", 163585},
    {"<|end_of_msg|>", 163586},
    {"<|open|>", 163587},
    {"<|close|>", 163588},
    {"<|sep|>", 163589},
    {"<|media_begin|>", 163602},
    {"<|media_content|>", 163603},
    {"<|media_end|>", 163604},
    {"<|media_pad|>", 163605},
};
// The other families' added tokens that their markup (engine/format/chat.h,
// engine/tokenizer/chat_tools.h, serve/reply.h) writes, in the released
// tokenizers' order (tests/fixtures/tokenizer/{qwen3,glm45,gpt-oss,deepseek}).
constexpr Special kQwen3Specials[] = {
    {"<|endoftext|>"},   {"<|im_start|>"},     {"<|im_end|>"}, {"<tool_call>"}, {"</tool_call>"},
    {"<tool_response>"}, {"</tool_response>"}, {"<think>"},    {"</think>"},
};
constexpr Special kDeepseekV31Specials[] = {
    {"<｜begin▁of▁sentence｜>"},
    {"<｜end▁of▁sentence｜>"},
    {"<｜User｜>"},
    {"<｜Assistant｜>"},
    {"<｜tool▁calls▁begin｜>"},
    {"<｜tool▁calls▁end｜>"},
    {"<｜tool▁call▁begin｜>"},
    {"<｜tool▁call▁end｜>"},
    {"<｜tool▁output▁begin｜>"},
    {"<｜tool▁output▁end｜>"},
    {"<｜tool▁sep｜>"},
    {"<think>"},
    {"</think>"},
};
constexpr Special kGlm45Specials[] = {
    {"<|endoftext|>"},    {"[gMASK]"},       {"<sop>"},           {"<|system|>"},
    {"<|user|>"},         {"<|assistant|>"}, {"<|observation|>"}, {"<think>"},
    {"</think>"},         {"<tool_call>"},   {"</tool_call>"},    {"<tool_response>"},
    {"</tool_response>"}, {"<arg_key>"},     {"</arg_key>"},      {"<arg_value>"},
    {"</arg_value>"},     {"/nothink"},
};
constexpr Special kHarmonySpecials[] = {
    {"<|startoftext|>"}, {"<|endoftext|>"}, {"<|return|>"},  {"<|constrain|>"}, {"<|channel|>"},
    {"<|start|>"},       {"<|end|>"},       {"<|message|>"}, {"<|call|>"},      {"<|endofprompt|>"},
};

// A family's specials, its bos and eos (texts among them, as its released
// config.json names them; no bos: empty) and its chat.json.
struct FamilyTokens {
  std::span<const Special> specials;
  std::string_view bos, eos;
  ChatFormat chat;
};

std::optional<FamilyTokens> ForFamily(std::string_view family) {
  if (family == kFamilyKimiK2)
    return FamilyTokens{kKimiSpecials, "[BOS]", "<|im_end|>", ChatFormat::Kimi()};
  if (family == kFamilyXtml)
    return FamilyTokens{kK3Specials, "[BOS]", kXtmlEndOfMessage, ChatFormat::Xtml(false)};
  if (family == kFamilyQwen3)
    return FamilyTokens{kQwen3Specials, "<|endoftext|>", "<|im_end|>", ChatFormat::Qwen3(true)};
  if (family == kFamilyDeepseekV31)
    return FamilyTokens{kDeepseekV31Specials, kDeepseekV31Specials[0].text,
                        kDeepseekV31Specials[1].text, ChatFormat::DeepseekV31()};
  if (family == kFamilyGlm45)
    return FamilyTokens{kGlm45Specials, "", "<|endoftext|>", ChatFormat::Glm45()};
  if (family == kFamilyHarmony)
    return FamilyTokens{kHarmonySpecials, "<|startoftext|>", "<|return|>", ChatFormat::Harmony()};
  return std::nullopt;
}

}  // namespace

const char* SynthChatFamily(Arch arch) {
  switch (arch) {
    case Arch::kKimiLinear:
      return kFamilyKimiK2;
    case Arch::kDeepseekV3:
    case Arch::kDeepseekV32:  // V3.2's own chat markup (its encoding script) is not built: V3.1's stands in
      return kFamilyDeepseekV31;
    case Arch::kQwen3Moe:
    case Arch::kQwen3Next:
      return kFamilyQwen3;
    case Arch::kGlm4Moe:
    case Arch::kGlm4MoeLite:  // GLM-4.7-Flash has GLM-4.5's tokenizer and chat
    case Arch::kGlmMoeDsa:    // GLM-5's markup is GLM-4.5's as far as known here
      return kFamilyGlm45;
    case Arch::kDots1:  // dots.llm1's own chat markup is not built: ChatML stands in
      return kFamilyQwen3;
    case Arch::kGptOss:
      return kFamilyHarmony;
    case Arch::kKimiK3:
      return kFamilyXtml;
    case Arch::kMinimaxM2:  // MiniMax's own chat format is not built: ChatML stands in
      return kFamilyQwen3;
  }
  return kFamilyKimiK2;
}

TokenizerFiles MakeTokenizerFiles(int vocab_size, std::string_view family) {
  TokenizerFiles f;
  const std::optional<FamilyTokens> fam = ForFamily(family);
  if (!fam) {
    f.error = "no synthetic tokenizer for the chat family \"" + std::string(family) + "\"";
    return f;
  }
  const std::span<const Special> kSpecials = fam->specials;
  std::vector<std::string> tokens;
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
    seen.insert(tokens.back());
  }
  for (std::string_view w : kWords) {
    for (size_t n = 2; n <= w.size(); ++n) {
      std::string prefix(w.substr(0, n));
      if (seen.insert(prefix).second) tokens.push_back(std::move(prefix));
    }
  }
  const int n_special = static_cast<int>(kSpecials.size());
  const bool real_ids = kSpecials.front().real_id > 0 && vocab_size > kSpecials.back().real_id;
  const int first_special = static_cast<int>(tokens.size());
  if (!real_ids && first_special + n_special > vocab_size) {
    f.error = "vocab_size " + std::to_string(vocab_size) +
              " is too small for the synthetic tokenizer (" +
              std::to_string(first_special + n_special) + " tokens)";
    return f;
  }
  if (real_ids && first_special > kSpecials.front().real_id) {
    f.error = "synthetic tokenizer overlaps the special ids";
    return f;
  }
  for (size_t r = 0; r < tokens.size(); ++r)
    f.tokenizer_model += tokenizer::Base64Encode(tokens[r]) + " " + std::to_string(r) + "\n";

  nlohmann::json specials = nlohmann::json::array();
  for (int i = 0; i < n_special; ++i) {
    const int id = real_ids ? kSpecials[i].real_id : first_special + i;
    specials.push_back({{"id", id}, {"text", std::string(kSpecials[i].text)}});
    if (kSpecials[i].text == fam->bos) f.bos_id = id;
    if (kSpecials[i].text == fam->eos) f.eos_id = id;
  }
  f.specials_json = specials.dump(1);
  f.chat_json = fam->chat.ToJson().dump(1);
  return f;
}

}  // namespace waste
