#include "engine/synth/tokenizer_files.h"

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
  int kimi_id;  // id in Kimi's real vocabulary
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
constexpr int kKimiFirstSpecial = 163584;

}  // namespace

TokenizerFiles MakeTokenizerFiles(int vocab_size, bool xtml) {
  const std::span<const Special> kSpecials =
      xtml ? std::span<const Special>(kK3Specials) : std::span<const Special>(kKimiSpecials);
  TokenizerFiles f;
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
  const bool kimi_ids = vocab_size > kSpecials.back().kimi_id;
  const int first_special = static_cast<int>(tokens.size());
  if (!kimi_ids && first_special + n_special > vocab_size) {
    f.error = "vocab_size " + std::to_string(vocab_size) +
              " is too small for the synthetic tokenizer (" +
              std::to_string(first_special + n_special) + " tokens)";
    return f;
  }
  if (kimi_ids && first_special > kKimiFirstSpecial) {
    f.error = "synthetic tokenizer overlaps the special ids";
    return f;
  }
  for (size_t r = 0; r < tokens.size(); ++r)
    f.tokenizer_model += tokenizer::Base64Encode(tokens[r]) + " " + std::to_string(r) + "\n";

  nlohmann::json specials = nlohmann::json::array();
  for (int i = 0; i < n_special; ++i) {
    const int id = kimi_ids ? kSpecials[i].kimi_id : first_special + i;
    specials.push_back({{"id", id}, {"text", std::string(kSpecials[i].text)}});
    if (kSpecials[i].text == "[BOS]") f.bos_id = id;
    // Kimi's eos_token_id: <|im_end|>, K3's <|end_of_msg|> (the same id).
    if (kSpecials[i].text == "<|im_end|>" || kSpecials[i].text == kXtmlEndOfMessage) f.eos_id = id;
  }
  f.specials_json = specials.dump(1);
  f.chat_json = (xtml ? ChatFormat::Xtml(false) : ChatFormat::Kimi()).ToJson().dump(1);
  return f;
}

}  // namespace waste
