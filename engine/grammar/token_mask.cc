#include "engine/grammar/token_mask.h"

#include <algorithm>
#include <cmath>

namespace waste::grammar {
namespace {

// Whole UTF-8 characters (no overlong forms, surrogates or values past
// U+10FFFF) without '"', '\\' or control bytes: their number, or -1.
int64_t PlainChars(std::string_view s) {
  int64_t chars = 0;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b < 0x80) {
      if (b < 0x20 || b == '"' || b == '\\') return -1;
      len = 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return -1;
    }
    if (i + len > s.size()) return -1;
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return -1;
    }
    i += len;
    ++chars;
  }
  return chars;
}

void Set(std::vector<uint64_t>* bits, int32_t id) {
  (*bits)[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
}
bool Get(const std::vector<uint64_t>& bits, int32_t id) {
  return (bits[static_cast<size_t>(id) / 64] >> (id % 64)) & 1;
}

}  // namespace

VocabIndex::VocabIndex(const Tokenizer& tok, int vocab) : vocab_(std::max(vocab, 0)) {
  bytes_.resize(static_cast<size_t>(vocab_));
  plain_.assign((static_cast<size_t>(vocab_) + 63) / 64, 0);
  std::vector<std::pair<std::string_view, int32_t>> sorted;
  std::vector<std::pair<int64_t, int32_t>> plain;  // code points, id
  for (int32_t id = 0; id < vocab_; ++id) {
    if (tok.IsSpecial(id)) continue;
    const std::string_view b = tok.TokenBytes(id);
    if (b.empty()) continue;
    bytes_[static_cast<size_t>(id)] = b;
    sorted.emplace_back(bytes_[static_cast<size_t>(id)], id);
    const int64_t chars = PlainChars(b);
    if (chars > 0) {
      Set(&plain_, id);
      plain.emplace_back(chars, id);
    } else {
      others_.push_back(id);
    }
  }
  std::sort(plain.begin(), plain.end());
  for (const auto& [chars, id] : plain) {
    plain_by_chars_.push_back(id);
    plain_upto_.resize(static_cast<size_t>(chars) + 1, plain_by_chars_.size() - 1);
    plain_upto_[static_cast<size_t>(chars)] = plain_by_chars_.size();
  }
  std::sort(sorted.begin(), sorted.end());
  // The trie, each node's children side by side: [lo, hi) of `sorted`
  // share the node's `depth` bytes; the shortest (sorted first) may end there.
  trie_.emplace_back();
  struct Range {
    uint32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Range> unvisited{{0, 0, sorted.size(), 0}};
  while (!unvisited.empty()) {
    Range r = unvisited.back();
    unvisited.pop_back();
    if (r.lo < r.hi && sorted[r.lo].first.size() == r.depth)
      trie_[r.node].token = sorted[r.lo++].second;
    trie_[r.node].first_child = static_cast<uint32_t>(trie_.size());
    for (size_t i = r.lo; i < r.hi;) {
      const auto byte = static_cast<uint8_t>(sorted[i].first[r.depth]);
      size_t j = i;
      while (j < r.hi && static_cast<uint8_t>(sorted[j].first[r.depth]) == byte) ++j;
      Node child;
      child.byte = byte;
      trie_.push_back(child);
      ++trie_[r.node].children;
      unvisited.push_back({static_cast<uint32_t>(trie_.size() - 1), i, j, r.depth + 1});
      i = j;
    }
  }
}

std::string_view VocabIndex::bytes(int32_t id) const {
  if (id < 0 || id >= vocab_) return {};
  return bytes_[static_cast<size_t>(id)];
}

size_t VocabIndex::Allowed(const JsonMatcher& m, std::vector<uint64_t>* allowed) const {
  size_t n = 0;
  const uint64_t room = m.PlainRoom();
  if (room > 0) {
    const uint64_t most =
        plain_upto_.empty() ? 0 : plain_upto_.size() - 1;  // the longest's code points
    if (room >= most) {
      *allowed = plain_;
      n = plain_by_chars_.size();
    } else {
      allowed->assign(plain_.size(), 0);
      n = plain_upto_[room];
      for (size_t i = 0; i < n; ++i) Set(allowed, plain_by_chars_[i]);
    }
    JsonMatcher one = m;
    for (int32_t id : others_) {
      const std::string_view b = bytes_[static_cast<size_t>(id)];
      if (!one.AdvanceFrom(m, static_cast<uint8_t>(b[0]))) continue;
      if (one.Advance(b.substr(1))) Set(allowed, id), ++n;
    }
    return n;
  }
  allowed->assign(plain_.size(), 0);
  std::vector<JsonMatcher> states(1, m);
  Walk(0, 0, states, allowed, &n);
  return n;
}

void VocabIndex::Walk(uint32_t node, size_t depth, std::vector<JsonMatcher>& states,
                      std::vector<uint64_t>* allowed, size_t* n) const {
  if (states.size() <= depth + 1) states.push_back(states[depth]);
  const Node& at = trie_[node];
  for (uint32_t c = at.first_child; c < at.first_child + at.children; ++c) {
    if (!states[depth + 1].AdvanceFrom(states[depth], trie_[c].byte)) continue;
    if (trie_[c].token >= 0) Set(allowed, trie_[c].token), ++*n;
    if (trie_[c].children) Walk(c, depth + 1, states, allowed, n);
  }
}

size_t VocabIndex::Along(std::string_view text, std::vector<uint64_t>* allowed) const {
  allowed->assign(plain_.size(), 0);
  size_t n = 0;
  uint32_t node = 0;
  for (const char c : text) {
    const Node& at = trie_[node];
    const auto child =
        std::find_if(trie_.begin() + at.first_child, trie_.begin() + at.first_child + at.children,
                     [&](const Node& k) { return k.byte == static_cast<uint8_t>(c); });
    if (child == trie_.begin() + at.first_child + at.children) break;
    node = static_cast<uint32_t>(child - trie_.begin());
    if (child->token >= 0) Set(allowed, child->token), ++n;
  }
  return n;
}

JsonTokenConstraint::JsonTokenConstraint(std::shared_ptr<const JsonGrammar> g,
                                         std::shared_ptr<const VocabIndex> vocab,
                                         int64_t max_tokens)
    : m_(g), vocab_(std::move(vocab)), left_(max_tokens > 0 ? max_tokens : -1) {
  constexpr uint64_t kMostSlack = 1024;
  for (const SchemaNode& n : g->nodes) slack_ = std::max(slack_, std::min(n.shortest, kMostSlack));
  slack_ += 32;
}

bool JsonTokenConstraint::Closing(size_t* n) {
  constexpr size_t kReach = 4096;  // the longest closing looked for
  if (left_ < 0 || static_cast<uint64_t>(left_) > kReach + slack_ + 1) return false;
  const auto close = m_.Closing(kReach);
  if (!close || close->size() + 1 + slack_ < static_cast<uint64_t>(left_)) return false;
  *n = vocab_->Along(*close, &allowed_);
  return *n > 0 || close->empty();
}

size_t JsonTokenConstraint::Mask(std::span<float> logits) {
  size_t n = 0;
  if (!Closing(&n)) n = vocab_->Allowed(m_, &allowed_);
  for (size_t i = 0; i < logits.size(); ++i)
    if (i >= static_cast<size_t>(vocab_->vocab()) || !Get(allowed_, static_cast<int32_t>(i)))
      logits[i] = -INFINITY;
  return n;
}

bool JsonTokenConstraint::Accept(int32_t token) {
  const std::string_view b = vocab_->bytes(token);
  if (left_ > 0) --left_;
  return !b.empty() && m_.Advance(b);
}

}  // namespace waste::grammar
