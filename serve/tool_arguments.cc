#include "serve/tool_arguments.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "engine/format/chat.h"
#include "engine/tokenizer/chat_tools.h"

namespace waste::serve {
namespace {

using grammar::JsonGrammar;
using grammar::SchemaNode;

// The JSON types an argument element names (K3's order of writing them here).
constexpr const char* kTypes[] = {"string", "number", "boolean", "null", "object", "array"};
constexpr int kNoType = -1;
constexpr int kMaxDepth = 64;  // anyOf nested in anyOf (a $ref may loop)

int LiteralType(std::string_view literal) {
  switch (literal.empty() ? 'x' : literal[0]) {
    case '"':
      return 0;
    case 't':
    case 'f':
      return 2;
    case 'n':
      return 3;
    case '{':
      return 4;
    case '[':
      return 5;
    default:
      return 1;
  }
}

int KindType(SchemaNode::Kind k) {
  switch (k) {
    case SchemaNode::Kind::kString:
      return 0;
    case SchemaNode::Kind::kNumber:
      return 1;
    case SchemaNode::Kind::kObject:
      return 4;
    case SchemaNode::Kind::kArray:
      return 5;
    default:
      return kNoType;
  }
}

// The nodes of `node` whose values are of type `type` (literals of that type
// as a node of their own, appended to `out`); with `type` kNoType, the types
// found as bits.
void Leaves(const JsonGrammar& g, int node, int type, JsonGrammar* out, std::vector<int>* leaves,
            unsigned* types, int depth) {
  if (depth > kMaxDepth) return;
  const SchemaNode& n = g.nodes[static_cast<size_t>(node)];
  if (n.kind == SchemaNode::Kind::kAnyOf) {
    for (int a : n.alternatives) Leaves(g, a, type, out, leaves, types, depth + 1);
  } else if (n.kind == SchemaNode::Kind::kLiterals) {
    SchemaNode kept;
    kept.kind = SchemaNode::Kind::kLiterals;
    for (const std::string& l : n.literals) {
      *types |= 1u << LiteralType(l);
      if (LiteralType(l) == type) kept.literals.push_back(l);
    }
    if (out && !kept.literals.empty()) {
      out->nodes.push_back(std::move(kept));
      leaves->push_back(static_cast<int>(out->nodes.size() - 1));
    }
  } else {
    *types |= 1u << KindType(n.kind);
    if (KindType(n.kind) == type) leaves->push_back(node);
  }
}

unsigned TypesOf(const JsonGrammar& g, int node) {
  unsigned types = 0;
  std::vector<int> none;
  Leaves(g, node, kNoType, nullptr, &none, &types, 0);
  return types;
}

// `g` with `node`'s values of `type` for its root.
std::shared_ptr<const JsonGrammar> Restrict(const JsonGrammar& g, int node, int type) {
  auto out = std::make_shared<JsonGrammar>(g);
  std::vector<int> leaves;
  unsigned types = 0;
  Leaves(g, node, type, out.get(), &leaves, &types, 0);
  if (leaves.size() == 1) {
    out->root = leaves[0];
  } else {
    SchemaNode any;
    any.alternatives = leaves;
    out->nodes.push_back(std::move(any));
    out->root = static_cast<int>(out->nodes.size() - 1);
  }
  return out;
}

std::string Quoted(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

// A raw string's bytes as JSON string content (nlohmann's escapes, which
// enum literals are written in).
void EscapeJson(std::string_view raw, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->clear();
  for (const char c : raw) {
    const auto b = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      *out += '\\', *out += c;
    } else if (b >= 0x20) {
      *out += c;
    } else if (c == '\n') {
      *out += "\\n";
    } else if (c == '\t') {
      *out += "\\t";
    } else if (c == '\r') {
      *out += "\\r";
    } else if (c == '\b') {
      *out += "\\b";
    } else if (c == '\f') {
      *out += "\\f";
    } else {
      *out += "\\u00", *out += kHex[b >> 4], *out += kHex[b & 15];
    }
  }
}

}  // namespace

std::string XtmlUnescape(std::string_view v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v.substr(i, 6) == "&quot;") {
      out += '"', i += 5;
    } else if (v.substr(i, 5) == "&amp;") {
      out += '&', i += 4;
    } else {
      out += v[i];
    }
  }
  return out;
}

Result<std::shared_ptr<const KeyValueArguments>> KeyValueArguments::Make(std::string_view family,
                                                                         const JsonGrammar& g) {
  const bool glm = family == kFamilyGlm45, qwen = family == kFamilyQwen35;
  const SchemaNode& root = g.nodes[static_cast<size_t>(g.root)];
  if (root.kind != SchemaNode::Kind::kObject)
    return Status::Error(std::string(family) +
                         "'s arguments are key/value pairs: the schema must be one object with "
                         "properties (not an enum, a const or an anyOf)");
  auto a = std::make_shared<KeyValueArguments>();
  if (glm) {
    a->sep = "\n";
    a->value_close = kGlmValueClose;
    a->call_close = kGlmCallClose;
    a->forbidden = {std::string(kGlmCallClose)};
  } else if (qwen) {
    // The template's "\n" around a value: the one after the head, the one before the close.
    a->sep = "\n";
    a->value_close = "\n" + std::string(kQwen35ParameterClose);
    a->call_close = kQwen35CallClose;
    a->forbidden = {std::string(kQwen35ParameterClose), std::string(kGlmCallClose)};
  } else {
    a->value_close = std::string(kXtmlClose) + "argument" + kXtmlSep;
    a->call_close = std::string(kXtmlClose) + "call" + kXtmlSep;
    a->forbidden = {kXtmlClose};
  }
  for (const SchemaNode::Property& p : root.properties) {
    Key k;
    k.key = nlohmann::json::parse(Quoted(p.key)).get<std::string>();
    k.required = p.required;
    const std::vector<std::string> markup =
        glm    ? std::vector<std::string>{std::string(kGlmKeyClose), std::string(kGlmCallClose)}
        : qwen ? std::vector<std::string>{">", "\n"}  // its parsers read the key up to ">"
               : std::vector<std::string>{kXtmlOpen, kXtmlClose, kXtmlSep, kXtmlEndOfMessage};
    const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
    for (const std::string& m : markup)
      if (k.key.find(m) != std::string::npos)
        return Status::Error("property '" + k.key + "': a key holding " + m +
                             " cannot be written in " + std::string(family) + "'s markup");
    if ((glm || qwen) && !k.key.empty() && (space(k.key.front()) || space(k.key.back())))
      return Status::Error("property '" + k.key + "': " + std::string(family) +
                           "'s parsers trim keys");
    const unsigned types = TypesOf(g, p.node);
    if (glm || qwen) {
      auto whole = std::make_shared<JsonGrammar>(g);
      whole->root = p.node;
      std::string head = glm ? std::string(kGlmKeyOpen) + k.key + std::string(kGlmKeyClose) + "\n" +
                                   std::string(kGlmValueOpen)
                             : std::string(kQwen35Parameter) + k.key + ">\n";
      k.values.push_back({std::move(head), types == 1u, std::move(whole)});
    } else {
      for (int t = 0; t < static_cast<int>(std::size(kTypes)); ++t)
        if (types & (1u << t))
          k.values.push_back({std::string(kXtmlOpen) + "argument key=\"" +
                                  chat_tools::XtmlEscape(k.key) + "\" type=\"" + kTypes[t] + "\"" +
                                  kXtmlSep,
                              t == 0, Restrict(g, p.node, t)});
    }
    a->keys.push_back(std::move(k));
  }
  return std::shared_ptr<const KeyValueArguments>(std::move(a));
}

bool KeyValueArguments::Raw(std::string_view key) const {
  for (const Key& k : keys)
    if (k.key == key) return k.values.size() == 1 && k.values[0].raw;
  return false;
}

std::shared_ptr<const ValueTokens> MakeValueTokens(const Tokenizer& tok,
                                                   const grammar::VocabIndex& vocab,
                                                   std::span<const std::string> markers) {
  auto out = std::make_shared<ValueTokens>();
  for (int32_t id = 0; id < vocab.vocab(); ++id) {
    if (tok.IsSpecial(id)) {
      out->markup.push_back(id);
      continue;
    }
    const std::string_view b = vocab.bytes(id);
    if (b.empty()) continue;
    bool touches = false;
    for (const std::string& m : markers) {
      touches = touches || b.find(m) != std::string_view::npos;
      // A byte compared first: most tokens share no end with a marker.
      for (size_t k = 1; !touches && k < m.size(); ++k)
        touches = (b.front() == m[k] && b.starts_with(std::string_view(m).substr(k))) ||
                  (b.back() == m[k - 1] && b.ends_with(std::string_view(m).substr(0, k)));
    }
    if (touches)
      out->markup.push_back(id);
    else if (std::any_of(b.begin(), b.end(), [](char c) {
               return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
             }))
      out->escaped.push_back(id);
  }
  return out;
}

KeyValueConstraint::KeyValueConstraint(std::shared_ptr<const KeyValueArguments> args,
                                       const Tokenizer& tok,
                                       std::shared_ptr<const grammar::VocabIndex> vocab,
                                       std::shared_ptr<const ValueTokens> tokens)
    : args_(std::move(args)),
      tok_(tok),
      vocab_(std::move(vocab)),
      tokens_(std::move(tokens)),
      used_(args_->keys.size(), false) {
  Markup("", "");
}

void KeyValueConstraint::Markup(std::string lead, std::string got) {
  in_value_ = false;
  alts_.clear();
  bool required_left = false;
  for (size_t k = 0; k < args_->keys.size(); ++k) {
    if (used_[k]) continue;
    required_left = required_left || args_->keys[k].required;
    for (size_t v = 0; v < args_->keys[k].values.size(); ++v)
      alts_.push_back(
          {lead + args_->keys[k].values[v].head, static_cast<int>(k), static_cast<int>(v)});
  }
  if (!required_left) alts_.push_back({lead + args_->call_close, -1, 0});
  got_ = std::move(got);
  Settle();
}

void KeyValueConstraint::Settle() {
  for (const Alt& a : alts_) {
    if (a.text != got_) continue;
    if (std::any_of(alts_.begin(), alts_.end(), [&](const Alt& o) {
          return o.text.size() > got_.size() && o.text.starts_with(got_);
        }))
      continue;
    if (a.key < 0) {
      done_ = true;
      return;
    }
    const KeyValueArguments::Value& v =
        args_->keys[static_cast<size_t>(a.key)].values[static_cast<size_t>(a.value)];
    used_[static_cast<size_t>(a.key)] = true;
    in_value_ = true;
    raw_ = v.raw;
    value_ = {};
    value_.m.emplace(v.grammar);
    scratch_.emplace(v.grammar);
    if (raw_) value_.m->Advance('"');
    return;
  }
}

bool KeyValueConstraint::MarkupAllows(std::string_view bytes) const {
  if (bytes.empty()) return false;
  return std::any_of(alts_.begin(), alts_.end(), [&](const Alt& a) {
    return a.text.size() >= got_.size() + bytes.size() && a.text.starts_with(got_) &&
           std::string_view(a.text).substr(got_.size()).starts_with(bytes);
  });
}

bool KeyValueConstraint::Feed(ValueState* s, std::string_view content) const {
  if (content.empty()) return true;
  std::string window = s->tail + std::string(content);
  for (const std::string& f : args_->forbidden)
    if (window.find(f) != std::string::npos) return false;
  if (raw_) {
    std::string escaped;
    EscapeJson(content, &escaped);
    if (!s->m->Advance(escaped)) return false;
  } else if (!s->m->Advance(content)) {
    return false;
  }
  size_t keep = 0;
  for (const std::string& f : args_->forbidden) keep = std::max(keep, f.size() - 1);
  s->tail = window.substr(window.size() - std::min(keep, window.size()));
  return true;
}

bool KeyValueConstraint::Ends(const ValueState& s) const {
  if (!raw_) return s.m->complete();
  grammar::JsonMatcher closed = *s.m;
  return closed.Advance('"') && closed.complete();
}

bool KeyValueConstraint::Step(std::string_view bytes, bool special, ValueState* s,
                              bool* ended) const {
  if (bytes.empty()) return false;  // a token of no bytes (a special without text) writes nothing
  const std::string t = s->held + std::string(bytes);
  const std::string_view close = args_->value_close;
  const size_t at = t.find(close);
  *ended = at != std::string::npos;
  size_t content = at;
  if (*ended) {
    // The value's end closes the token (what follows it is the next markup's).
    if (at + close.size() != t.size()) return false;
  } else {
    size_t held = std::min(close.size() - 1, t.size());
    while (held > 0 && !t.ends_with(close.substr(0, held))) --held;
    content = t.size() - held;
  }
  if (special && content > s->held.size()) return false;  // a special is markup, never a value's
  if (!Feed(s, std::string_view(t).substr(0, content))) return false;
  if (*ended) return Ends(*s);
  s->held = t.substr(content);
  if (s->held.empty() || Ends(*s)) return true;
  // What is held must be able to go on: as the value's end, or as its bytes.
  ValueState as_bytes = *s;
  return Feed(&as_bytes, as_bytes.held);
}

bool KeyValueConstraint::Escaped(std::string_view bytes) {
  EscapeJson(bytes, &escaped_);
  return scratch_->AdvanceFrom(*value_.m, static_cast<uint8_t>(escaped_[0])) &&
         scratch_->Advance(std::string_view(escaped_).substr(1));
}

size_t KeyValueConstraint::Mask(std::span<float> logits) {
  const size_t vocab = std::min(logits.size(), static_cast<size_t>(vocab_->vocab()));
  for (size_t i = vocab; i < logits.size(); ++i) logits[i] = -INFINITY;
  const auto set = [&](int32_t id, bool on) {
    uint64_t& word = allowed_[static_cast<size_t>(id) / 64];
    const uint64_t bit = uint64_t{1} << (id % 64);
    word = on ? word | bit : word & ~bit;
  };
  if (done_) {
    allowed_.assign((vocab + 63) / 64, 0);
  } else if (!in_value_) {
    allowed_.assign((vocab + 63) / 64, 0);
    for (size_t i = 0; i < vocab; ++i) {
      const auto id = static_cast<int32_t>(i);
      set(id, MarkupAllows(tok_.TokenBytes(id)));
    }
  } else if (!value_.held.empty()) {  // every token may end what is held
    allowed_.assign((vocab + 63) / 64, 0);
    for (size_t i = 0; i < vocab; ++i) {
      const auto id = static_cast<int32_t>(i);
      ValueState s = value_;
      bool ended = false;
      set(id, Step(tok_.TokenBytes(id), tok_.IsSpecial(id), &s, &ended));
    }
  } else {
    // The value's bytes alone, as engine/grammar's mask takes them (a raw
    // string's are the same escaped, but for the escaped tokens); then the
    // tokens that may touch the markup.
    vocab_->Allowed(*value_.m, &allowed_);
    if (raw_)
      for (int32_t id : tokens_->escaped) set(id, Escaped(tok_.TokenBytes(id)));
    for (int32_t id : tokens_->markup) {
      ValueState s = value_;
      bool ended = false;
      set(id, Step(tok_.TokenBytes(id), tok_.IsSpecial(id), &s, &ended));
    }
  }
  size_t n = 0;
  for (size_t i = 0; i < vocab; ++i)
    if ((allowed_[i / 64] >> (i % 64)) & 1)
      ++n;
    else
      logits[i] = -INFINITY;
  return n;
}

bool KeyValueConstraint::Accept(int32_t token) {
  const std::string_view b = tok_.TokenBytes(token);
  if (done_ || b.empty()) return false;
  if (!in_value_) {
    if (!MarkupAllows(b)) return false;
    got_ += b;
    Settle();
    return true;
  }
  bool ended = false;
  if (!Step(b, tok_.IsSpecial(token), &value_, &ended)) return false;
  if (ended) Markup(args_->sep, "");
  return true;
}

namespace {

// A string's bytes as inside a JSON string (whole UTF-8 characters).
std::string Escaped(std::string_view s) {
  const std::string q =
      nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return q.substr(1, q.size() - 2);
}

bool IsSpace(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

}  // namespace

KeyValueReader::KeyValueReader(std::shared_ptr<const KeyValueArguments> args)
    : args_(std::move(args)) {}

std::string KeyValueReader::Feed(std::string_view bytes) {
  held_.append(bytes);
  std::string out;
  for (;;) {
    if (!in_value_) {
      // A pair's head, after the separator (white space) before it.
      const size_t start = static_cast<size_t>(
          std::find_if_not(held_.begin(), held_.end(), IsSpace) - held_.begin());
      const std::string_view rest = std::string_view(held_).substr(start);
      const KeyValueArguments::Key* key = nullptr;
      const KeyValueArguments::Value* value = nullptr;
      for (const auto& k : args_->keys)
        for (const auto& v : k.values)
          if (rest.starts_with(v.head)) key = &k, value = &v;
      if (!value) return out;  // not whole yet
      out +=
          (pairs_ ? "," : "{") + nlohmann::json(key->key).dump() + ":" + (value->raw ? "\"" : "");
      held_.erase(0, start + value->head.size());
      pairs_ = in_value_ = true;
      raw_ = value->raw;
      value_begun_ = false;
    }
    const std::string& close = args_->value_close;
    const size_t end = held_.find(close);
    size_t keep = 0;  // what may begin the close
    if (end == std::string::npos)
      for (size_t n = std::min(close.size() - 1, held_.size()); n > 0 && keep == 0; --n)
        if (held_.compare(held_.size() - n, n, close, 0, n) == 0) keep = n;
    out += Value(end == std::string::npos ? held_.size() - keep : end, end != std::string::npos);
    if (end == std::string::npos) return out;
    held_.erase(0, close.size());
    in_value_ = false;
  }
}

std::string KeyValueReader::Value(size_t n, bool whole) {
  std::string_view v = std::string_view(held_).substr(0, n);
  std::string out;
  if (raw_) {
    out = Escaped(v) + (whole ? "\"" : "");
  } else {
    if (!value_begun_)
      while (!v.empty() && IsSpace(v.front())) v.remove_prefix(1);
    // Trailing white space waits: it is the value's only if more follows.
    size_t shown = v.size();
    while (shown > 0 && IsSpace(v[shown - 1])) --shown;
    out = v.substr(0, shown);
    value_begun_ = value_begun_ || shown > 0;
    if (!whole) n -= v.size() - shown;
  }
  held_.erase(0, n);
  return out;
}

std::string KeyValueReader::Close() {
  return std::string(in_value_ && raw_ ? "\"" : "") + (pairs_ ? "}" : "{}");
}

}  // namespace waste::serve
