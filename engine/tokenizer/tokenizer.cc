#include "engine/tokenizer/tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <tuple>
#include <unordered_map>
#include <utility>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "engine/format/container.h"  // ReadSmallFile, ParseJson
#include "engine/tokenizer/base64.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/nfc.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace waste {
namespace {

using tokenizer::Base64Decode;
using tokenizer::RankTable;

// Kimi's tiktoken.model is 2.4 MB for 163,840 tokens; a file this size would
// hold some 8 million.
constexpr uint64_t kMaxModelBytes = 64u << 20;
constexpr uint64_t kMaxSpecialsBytes = 16u << 20;
constexpr uint64_t kMaxMergesBytes = 64u << 20;
constexpr uint64_t kMaxPreTokenizerBytes = 1u << 20;
constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;
constexpr size_t kMaxSpecialText = 256;
constexpr size_t kMaxRankDigits = 9;

// A field of an untrusted line, fit for an error message: quoted, at most
// 40 characters, anything unprintable as \xNN.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > 40) out += "...";
  return out + "\"";
}

// An added token and how tokenizers matches it (AddedVocabulary):
// single_word only between non-word characters, lstrip and rstrip taking
// the whitespace beside it into the match, normalized ones matched in a
// second pass over the text the others left.
struct Special {
  int32_t id;
  std::string text;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false;
};

// A one-character class, tested at a byte offset of valid UTF-8: what
// tokenizers' \w and \s mean (Rust's regex crate, Unicode), through PCRE2.
class CharClass {
 public:
  static Result<std::shared_ptr<const CharClass>> Compile(const std::string& cls) {
    int err = 0;
    PCRE2_SIZE where = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(cls.data()), cls.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &where, nullptr);
    if (!re) return Status::Error("PCRE2 refused the class " + cls);
    auto c = std::make_shared<CharClass>();
    c->re_ = re;
    return std::shared_ptr<const CharClass>(std::move(c));
  }
  CharClass() = default;
  CharClass(const CharClass&) = delete;
  CharClass& operator=(const CharClass&) = delete;
  ~CharClass() { pcre2_code_free(re_); }
  // The byte length of the class's character at s[i], or 0 when s[i] is
  // not one. Match data of its own: a Tokenizer is used from many threads.
  size_t At(std::string_view s, size_t i) const {
    pcre2_match_data* d = pcre2_match_data_create_from_pattern(re_, nullptr);
    size_t n = 0;
    if (d && pcre2_match(re_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), i,
                         PCRE2_NO_UTF_CHECK, d, nullptr) > 0)
      n = pcre2_get_ovector_pointer(d)[1] - i;
    pcre2_match_data_free(d);
    return n;
  }

 private:
  pcre2_code* re_ = nullptr;
};

// Where the UTF-8 character that ends at s[i] (exclusive) starts.
size_t CharBefore(std::string_view s, size_t i) {
  do --i;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80);
  return i;
}

// The special texts as a byte trie, for the longest special at a position.
class SpecialTrie {
 public:
  SpecialTrie() : nodes_(1) {}
  void Add(std::string_view text, int32_t id) {
    first_[static_cast<uint8_t>(text[0])] = true;
    size_t n = 0;
    for (const char c : text) {
      const int32_t child = Child(n, static_cast<uint8_t>(c));
      if (child >= 0) {
        n = static_cast<size_t>(child);
      } else {
        nodes_.emplace_back();
        nodes_[n].children.emplace_back(static_cast<uint8_t>(c),
                                        static_cast<int32_t>(nodes_.size() - 1));
        n = nodes_.size() - 1;
      }
    }
    nodes_[n].id = id;
  }
  bool MayStart(char c) const { return first_[static_cast<uint8_t>(c)]; }
  // The id and length of the longest special text at s[pos], or {-1, 0}.
  std::pair<int32_t, size_t> LongestAt(std::string_view s, size_t pos) const {
    std::pair<int32_t, size_t> best{-1, 0};
    size_t n = 0;
    for (size_t i = pos; i < s.size(); ++i) {
      const int32_t child = Child(n, static_cast<uint8_t>(s[i]));
      if (child < 0) break;
      n = static_cast<size_t>(child);
      if (nodes_[n].id >= 0) best = {nodes_[n].id, i + 1 - pos};
    }
    return best;
  }

 private:
  struct Node {
    int32_t id = -1;
    std::vector<std::pair<uint8_t, int32_t>> children;
  };
  int32_t Child(size_t n, uint8_t b) const {
    for (const auto& [byte, child] : nodes_[n].children)
      if (byte == b) return child;
    return -1;
  }
  std::vector<Node> nodes_;
  std::array<bool, 256> first_{};
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// tokenizer.model: "base64 rank" per line, ranks exactly 0..N-1 in any order.
Result<RankTable> LoadRanks(std::string_view all) {
  const std::string w = "tokenizer.model";

  // Lines as tiktoken reads them: split at \n, a trailing \r dropped, empty
  // lines skipped.
  std::vector<std::pair<size_t, std::string_view>> lines;  // (line number, text)
  size_t lineno = 0;
  for (size_t pos = 0; pos < all.size();) {
    size_t nl = all.find('\n', pos);
    if (nl == std::string_view::npos) nl = all.size();
    std::string_view line = all.substr(pos, nl - pos);
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) lines.emplace_back(lineno, line);
    pos = nl + 1;
  }
  if (lines.empty()) return Status::Error(w + ": no tokens");
  const size_t count = lines.size();

  std::vector<std::string> tokens(count);
  std::vector<size_t> line_of(count, 0);  // the line that gave each rank; 0 = none yet
  std::unordered_map<std::string_view, int32_t> rank_of;  // views into `tokens`
  rank_of.reserve(count);
  for (const auto& [no, line] : lines) {
    const std::string where = w + ": line " + std::to_string(no);
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
      return Status::Error(where + ": expected \"<base64> <rank>\", got " + Quote(line));
    const std::string_view b64 = line.substr(0, sp), rank_text = line.substr(sp + 1);
    std::optional<std::string> bytes = Base64Decode(b64);
    if (!bytes) return Status::Error(where + ": bad base64 " + Quote(b64));
    if (rank_text.empty() || rank_text.size() > kMaxRankDigits ||
        !std::all_of(rank_text.begin(), rank_text.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      return Status::Error(where + ": bad rank " + Quote(rank_text));
    const size_t rank = std::stoul(std::string(rank_text));
    if (rank >= count)
      return Status::Error(where + ": rank " + std::to_string(rank) +
                           " leaves a gap: the file has " + std::to_string(count) +
                           " tokens, so the ranks must be 0.." + std::to_string(count - 1));
    if (line_of[rank])
      return Status::Error(where + ": rank " + std::to_string(rank) + " already given on line " +
                           std::to_string(line_of[rank]));
    tokens[rank] = std::move(*bytes);
    line_of[rank] = no;
    const auto [it, fresh] = rank_of.emplace(tokens[rank], static_cast<int32_t>(rank));
    if (!fresh)
      return Status::Error(where + ": token " + Quote(b64) + " already has rank " +
                           std::to_string(it->second) + " (line " +
                           std::to_string(line_of[static_cast<size_t>(it->second)]) + ")");
  }
  // `count` lines gave `count` distinct ranks, all below `count`: every rank
  // 0..count-1 is there.
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    if (!rank_of.count(std::string_view(&byte, 1))) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02x", b);
      return Status::Error(w + ": no token for the byte " + buf +
                           " (every single byte must be a token)");
    }
  }
  return RankTable(tokens);
}

// merges.txt: "left right" (two ids of tokenizer.model) per line, in
// priority order; the pair must concatenate to a token.
Result<tokenizer::MergeTable> LoadMerges(std::string_view all, const RankTable& ranks) {
  tokenizer::MergeTable merges;
  std::unordered_map<uint64_t, size_t> line_of;  // for the duplicate's message
  const auto id_at = [&](std::string_view f, int64_t* out) {
    if (f.empty() || f.size() > kMaxRankDigits ||
        !std::all_of(f.begin(), f.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    *out = std::stoll(std::string(f));
    return *out < ranks.size();
  };
  size_t lineno = 0;
  std::string joined;
  for (size_t pos = 0; pos < all.size();) {
    size_t nl = all.find('\n', pos);
    if (nl == std::string_view::npos) nl = all.size();
    const std::string_view line = all.substr(pos, nl - pos);
    pos = nl + 1;
    ++lineno;
    const std::string where = "merges.txt: line " + std::to_string(lineno);
    const size_t sp = line.find(' ');
    int64_t left = 0, right = 0;
    if (sp == std::string_view::npos || !id_at(line.substr(0, sp), &left) ||
        !id_at(line.substr(sp + 1), &right))
      return Status::Error(where + ": expected \"<id> <id>\" (ids of tokenizer.model, 0.." +
                           std::to_string(ranks.size() - 1) + "), got " + Quote(line));
    joined.assign(ranks.Bytes(static_cast<int32_t>(left)));
    joined.append(ranks.Bytes(static_cast<int32_t>(right)));
    const int32_t result = ranks.Find(joined);
    if (result < 0)
      return Status::Error(where + ": tokens " + std::to_string(left) + " and " +
                           std::to_string(right) + " do not join into a token");
    const auto rank = static_cast<int32_t>(lineno - 1);
    if (!merges.Add(static_cast<int32_t>(left), static_cast<int32_t>(right), {rank, result}))
      return Status::Error(where + ": the pair " + std::to_string(left) + " " +
                           std::to_string(right) + " is also line " +
                           std::to_string(line_of[(uint64_t(left) << 32) | uint64_t(right)]));
    line_of[(uint64_t(left) << 32) | uint64_t(right)] = lineno;
  }
  return merges;
}

Result<tokenizer::PreTokenizer> LoadPreTokenizer(std::string_view text) {
  auto doc = ParseJson(text, "pretokenizer.json");
  if (!doc.ok()) return doc.status();
  return tokenizer::PreTokenizer::FromSteps(*doc, "pretokenizer.json");
}

// normalizer.json: tokenizers' normalizer object; NFC is the one the engine runs.
Result<bool> LoadNormalizer(std::string_view text) {
  auto doc = ParseJson(text, "normalizer.json");
  if (!doc.ok()) return doc.status();
  const auto type = doc->is_object() ? doc->find("type") : doc->end();
  if (type == doc->end() || !type->is_string())
    return Status::Error("normalizer.json: not an object with a \"type\"");
  if (*type != "NFC")
    return Status::Error("normalizer.json: type " + type->dump().substr(0, 40) +
                         " is not NFC, the one the engine runs");
  return true;
}

// True unless `path` is absent (a file that is there but unreadable is an
// error when it is read).
bool Present(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 || errno != ENOENT;
}

Status LoadSpecials(std::string_view text, const RankTable& ranks, std::vector<Special>* out) {
  const int32_t n_ranks = ranks.size();
  auto doc = ParseJson(text, "specials.json");
  if (!doc.ok()) return doc.status();
  if (!doc->is_array()) return Status::Error("specials.json: not a list");
  std::unordered_map<int64_t, size_t> entry_of_id;
  std::unordered_map<std::string, size_t> entry_of_text;
  for (size_t i = 0; i < doc->size(); ++i) {
    const nlohmann::json& e = (*doc)[i];
    const std::string w = "specials.json: entry " + std::to_string(i);
    if (!e.is_object() || !e.contains("id") || !e.contains("text") ||
        !e["id"].is_number_integer() || !e["text"].is_string())
      return Status::Error(w + " is not {\"id\": int, \"text\": string}");
    const int64_t id = e["id"].is_number_unsigned() && e["id"].get<uint64_t>() > uint64_t(kMaxId)
                           ? kMaxId + 1
                           : e["id"].get<int64_t>();
    std::string t = e["text"].get<std::string>();
    if (id < 0 || id > kMaxId)
      return Status::Error(w + ": id " + e["id"].dump() + " is outside 0.." +
                           std::to_string(kMaxId));
    // A special inside the vocabulary (tokenizers' added tokens with an id
    // of model.vocab) is the token whose bytes are its text.
    if (id < n_ranks && ranks.Bytes(static_cast<int32_t>(id)) != t)
      return Status::Error(w + ": id " + std::to_string(id) +
                           " is a rank of tokenizer.model (ranks are 0.." +
                           std::to_string(n_ranks - 1) + ")");
    if (t.empty() || t.size() > kMaxSpecialText)
      return Status::Error(w + ": text is empty or longer than " + std::to_string(kMaxSpecialText) +
                           " bytes");
    if (const auto [it, fresh] = entry_of_id.emplace(id, i); !fresh)
      return Status::Error(w + ": id " + std::to_string(id) + " is also entry " +
                           std::to_string(it->second) + "'s");
    if (const auto [it, fresh] = entry_of_text.emplace(t, i); !fresh)
      return Status::Error(w + ": text " + Quote(t) + " is also entry " +
                           std::to_string(it->second) + "'s");
    Special sp{static_cast<int32_t>(id), std::move(t)};
    // tokenizers' matching flags, each optional (absent: false).
    for (auto [key, flag] :
         {std::pair{"lstrip", &sp.lstrip}, std::pair{"rstrip", &sp.rstrip},
          std::pair{"single_word", &sp.single_word}, std::pair{"normalized", &sp.normalized}}) {
      const auto f = e.find(key);
      if (f == e.end()) continue;
      if (!f->is_boolean()) return Status::Error(w + ": " + key + " is not true or false");
      *flag = f->get<bool>();
    }
    out->push_back(std::move(sp));
  }
  return Status::Ok();
}

}  // namespace

struct Tokenizer::State {
  State(RankTable r, tokenizer::PreTokenizer p) : ranks(std::move(r)), pre(std::move(p)) {}
  RankTable ranks;
  tokenizer::PreTokenizer pre;
  std::optional<tokenizer::MergeTable> merges;  // set: merges.txt's pairs, else rank = priority
  std::vector<Special> specials;
  std::unordered_map<int32_t, size_t> special_by_id;  // index into specials
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> special_by_text;
  SpecialTrie trie;                              // the specials matched first (normalized false)
  SpecialTrie normalized_trie;                   // then these, in the text the first left
  std::shared_ptr<const CharClass> word, space;  // tokenizers' \w and \s
  bool nfc = false;  // normalizer.json: content is NFC-normalized before it is split
  int32_t max_id = 0;
};

Result<Tokenizer> Tokenizer::Load(const std::string& dir) {
  Files f;
  auto model = ReadSmallFile(dir + "/tokenizer.model", kMaxModelBytes);
  if (!model.ok()) return model.status();
  f.tokenizer_model = std::move(*model);
  // Each optional file, read when present, within its size limit.
  for (auto [name, limit, out] :
       {std::tuple{"specials.json", kMaxSpecialsBytes, &f.specials_json},
        std::tuple{"merges.txt", kMaxMergesBytes, &f.merges_txt},
        std::tuple{"pretokenizer.json", kMaxPreTokenizerBytes, &f.pretokenizer_json},
        std::tuple{"normalizer.json", uint64_t{4096}, &f.normalizer_json}}) {
    const std::string path = dir + "/" + name;
    if (!Present(path)) continue;
    auto text = ReadSmallFile(path, limit);
    if (!text.ok()) return text.status();
    *out = std::move(*text);
  }
  return FromFiles(f);
}

Result<Tokenizer> Tokenizer::FromFiles(const Files& f) {
  auto ranks = LoadRanks(f.tokenizer_model);
  if (!ranks.ok()) return ranks.status();
  std::vector<Special> specials;
  if (f.specials_json) WASTE_RETURN_IF_ERROR(LoadSpecials(*f.specials_json, *ranks, &specials));
  std::optional<tokenizer::MergeTable> merges;
  if (f.merges_txt) {
    auto m = LoadMerges(*f.merges_txt, *ranks);
    if (!m.ok()) return m.status();
    merges = std::move(*m);
  }
  auto pre = f.pretokenizer_json ? LoadPreTokenizer(*f.pretokenizer_json)
                                 : tokenizer::PreTokenizer::Create();
  if (!pre.ok()) return pre.status();
  bool nfc = false;
  if (f.normalizer_json) {
    auto n = LoadNormalizer(*f.normalizer_json);
    if (!n.ok()) return n.status();
    nfc = *n;
  }

  // Rust's \w (regex-syntax's Unicode perl class) and \s (White_Space).
  auto word = CharClass::Compile(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])");
  if (!word.ok()) return word.status();
  auto space = CharClass::Compile(std::string("[") + tokenizer::kWhiteSpace + "]");
  if (!space.ok()) return space.status();

  auto s = std::make_shared<State>(std::move(*ranks), std::move(*pre));
  s->word = std::move(*word);
  s->space = std::move(*space);
  s->merges = std::move(merges);
  s->nfc = nfc;
  s->max_id = s->ranks.size() - 1;
  s->specials = std::move(specials);
  for (size_t i = 0; i < s->specials.size(); ++i) {
    const Special& sp = s->specials[i];
    s->special_by_id.emplace(sp.id, i);
    s->special_by_text.emplace(sp.text, sp.id);
    (sp.normalized ? s->normalized_trie : s->trie).Add(sp.text, sp.id);
    s->max_id = std::max(s->max_id, sp.id);
  }
  return Tokenizer(std::move(s));
}

void Tokenizer::EncodeContent(std::string_view text, std::vector<int32_t>* out) const {
  if (s_->nfc) {
    const std::string normalized = tokenizer::Nfc(text);
    if (normalized != text) return EncodeSplit(normalized, out);
  }
  EncodeSplit(text, out);
}

void Tokenizer::EncodeSplit(std::string_view text, std::vector<int32_t>* out) const {
  const RankTable& ranks = s_->ranks;
  if (s_->merges) {
    s_->pre.Split(text, [&](std::string_view piece) {
      tokenizer::BytePairEncodeMerges(piece, ranks, *s_->merges, out);
    });
    return;
  }
  s_->pre.Split(text, [&](std::string_view piece) {
    // A piece that is a token is that token, whether or not merges reach it.
    const int32_t r = ranks.Find(piece);
    if (r >= 0)
      out->push_back(r);
    else
      tokenizer::BytePairEncode(piece, ranks, out);
  });
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> out;
  if (tokenizer::IsValidUtf8(text)) {
    EncodeContent(text, &out);
  } else {
    EncodeContent(tokenizer::ReplaceInvalidUtf8(text), &out);
  }
  return out;
}

std::vector<int32_t> Tokenizer::EncodeMarkup(std::string_view text) const {
  std::string repaired;
  if (!tokenizer::IsValidUtf8(text)) {
    // Repairing first cannot move a special: a special's first byte is
    // ASCII or a UTF-8 lead byte, never part of an invalid subsequence's
    // maximal subpart.
    repaired = tokenizer::ReplaceInvalidUtf8(text);
    text = repaired;
  }
  std::vector<int32_t> out;
  const CharClass& word = *s_->word;
  const CharClass& space = *s_->space;
  // One pass of tokenizers' AddedVocabulary::find_matches over `t`: each
  // special of `trie` taken pushes its id, the stretches between go to `gap`.
  const auto match = [&](std::string_view t, const SpecialTrie& trie, const auto& gap) {
    size_t offset = 0;  // the end of the last match taken
    for (size_t i = 0; i < t.size();) {
      if (!trie.MayStart(t[i])) {
        ++i;
        continue;
      }
      const auto [id, len] = trie.LongestAt(t, i);
      if (id < 0) {
        ++i;
        continue;
      }
      // The search goes on where this match ends, taken or not
      // (aho-corasick's leftmost-longest matches do not overlap).
      size_t start = i, stop = i + len;
      i = stop;
      const Special& sp = s_->specials[s_->special_by_id.at(id)];
      if (sp.single_word && ((start > 0 && word.At(t, CharBefore(t, start))) ||
                             (stop < t.size() && word.At(t, stop))))
        continue;
      if (sp.lstrip) {
        size_t left = start;
        while (left > 0 && space.At(t, CharBefore(t, left))) left = CharBefore(t, left);
        start = std::max(left, offset);  // never into the last match
      }
      if (sp.rstrip)
        for (size_t n; stop < t.size() && (n = space.At(t, stop)) > 0;) stop += n;
      if (offset < start) gap(t.substr(offset, start - offset));
      out.push_back(id);
      offset = stop;
    }
    if (offset < t.size()) gap(t.substr(offset));
  };
  // tokenizers' two passes (AddedVocabulary::extract_and_normalize): the
  // specials not normalized over the whole text, then the normalized ones
  // over each stretch between (before normalization, which tokenizers runs
  // first: NFC changes no released family's special); what is left is
  // content, normalized as such.
  match(text, s_->trie, [&](std::string_view gap) {
    match(gap, s_->normalized_trie, [&](std::string_view rest) { EncodeContent(rest, &out); });
  });
  return out;
}

std::vector<int32_t> Tokenizer::EncodeParts(std::span<const Part> parts) const {
  std::vector<int32_t> out;
  std::string run;  // text since the last special, content and markup alike
  const auto flush = [&] {
    const std::vector<int32_t> ids = Encode(run);
    out.insert(out.end(), ids.begin(), ids.end());
    run.clear();
  };
  for (const Part& p : parts) {
    if (!p.markup) {
      run.append(p.text);
      continue;
    }
    // A template's markup is exact special-token text: the longest special
    // at each position, normalized or not (their flags are for text that
    // merely contains them, EncodeMarkup's).
    size_t segment = 0;
    for (size_t i = 0; i < p.text.size();) {
      if (!s_->trie.MayStart(p.text[i]) && !s_->normalized_trie.MayStart(p.text[i])) {
        ++i;
        continue;
      }
      auto [id, len] = s_->trie.LongestAt(p.text, i);
      if (const auto [nid, nlen] = s_->normalized_trie.LongestAt(p.text, i); nid >= 0 && nlen > len)
        id = nid, len = nlen;
      if (id < 0) {
        ++i;
        continue;
      }
      run.append(p.text.substr(segment, i - segment));
      flush();
      out.push_back(id);
      i += len;
      segment = i;
    }
    run.append(p.text.substr(segment));
  }
  flush();
  return out;
}

std::string_view Tokenizer::TokenBytes(int32_t id) const {
  if (id >= 0 && id < s_->ranks.size()) return s_->ranks.Bytes(id);
  const auto it = s_->special_by_id.find(id);
  return it == s_->special_by_id.end() ? std::string_view() : s_->specials[it->second].text;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string out;
  for (const int32_t id : ids) out.append(TokenBytes(id));
  return out;
}

std::optional<int32_t> Tokenizer::SpecialId(std::string_view text) const {
  const auto it = s_->special_by_text.find(text);
  if (it == s_->special_by_text.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return s_->special_by_id.count(id) != 0;
}

int32_t Tokenizer::max_id() const {
  return s_->max_id;
}
int32_t Tokenizer::n_ranks() const {
  return s_->ranks.size();
}
int32_t Tokenizer::n_specials() const {
  return static_cast<int32_t>(s_->specials.size());
}

}  // namespace waste
