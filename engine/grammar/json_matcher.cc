#include "engine/grammar/json_matcher.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace waste::grammar {
namespace {

using Kind = SchemaNode::Kind;
using Frame = JsonMatcher::Frame;
using Stack = JsonMatcher::Stack;

enum Type : uint8_t { kRoot, kObject, kKey, kArray, kString, kNumber, kLiteral };

// Phases. Root: before / after the value. Object: the gaps between its
// punctuation. Array likewise. String: content / after '\\' / in \uXXXX.
enum : uint8_t { kBefore = 0, kAfter = 1 };
enum : uint8_t { kObjStart, kObjOpen, kObjKeyDone, kObjColon, kObjValueDone, kObjComma };
enum : uint8_t { kArrStart, kArrOpen, kArrValueDone, kArrComma };
enum : uint8_t { kStrStart, kStrText, kStrEscape, kStrHex0 };  // kStrHex0 + i: i hex digits read
// Number: where in -int.frac e+exp the text is.
enum : uint8_t {
  kNumStart,
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumPoint,
  kNumFrac,
  kNumE,
  kNumESign,
  kNumExp
};

constexpr size_t kBoundedDigits = 16, kFreeDigits = 32, kExpDigits = 2;

bool IsWs(uint8_t b) {
  return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}
bool IsDigit(uint8_t b) {
  return b >= '0' && b <= '9';
}
bool IsHex(uint8_t b) {
  return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

uint64_t Bit(size_t i) {
  return uint64_t{1} << i;
}

// Is some x with a <= x < b (open at b) within n's bounds? (Positive side.)
bool Overlaps(const SchemaNode& n, double a, double b) {
  double lo = a;
  bool lo_in = true;
  if (n.minimum > a || (n.minimum == a && n.exclusive_minimum))
    lo = n.minimum, lo_in = !n.exclusive_minimum;
  if (!(lo < b)) return false;
  return lo < n.maximum || (lo == n.maximum && lo_in && !n.exclusive_maximum);
}
// Is some x with -b < x <= -a within n's bounds? (Negative side.)
bool OverlapsNegative(const SchemaNode& n, double a, double b) {
  double hi = -a;
  bool hi_in = true;
  if (n.maximum < hi || (n.maximum == hi && n.exclusive_maximum))
    hi = n.maximum, hi_in = !n.exclusive_maximum;
  if (!(hi > -b)) return false;
  return hi > n.minimum || (hi == n.minimum && hi_in && !n.exclusive_minimum);
}

bool InBounds(const SchemaNode& n, double v) {
  if (v < n.minimum || (v == n.minimum && n.exclusive_minimum)) return false;
  if (v > n.maximum || (v == n.maximum && n.exclusive_maximum)) return false;
  return !n.integer || std::floor(v) == v;
}

class Machine {
 public:
  explicit Machine(const JsonGrammar& g) : g_(g) {}

  // Feeds b to s. Alternatives that begin here go to `forks` (each still to
  // be fed b). False: s is dead.
  bool Feed(Stack& s, uint8_t b, std::vector<Stack>* forks) const {
    for (;;) {
      Frame& f = s.frames.back();
      switch (f.type) {
        case kRoot:
          if (IsWs(b)) return ++f.ws <= kMaxWhitespace;
          if (f.phase == kAfter) return false;
          f.phase = kAfter, f.ws = 0;
          if (!Push(s, g_.root, forks)) return false;
          continue;  // b begins the value
        case kObject:
          return Object(s, b, forks);
        case kKey:
          return Key(s, b);
        case kArray:
          return Array(s, b, forks);
        case kString:
          return String(s, b);
        case kNumber: {
          const int r = Number(s, b);
          if (r >= 0) return r == 1;
          continue;  // the number ended before b: b is its parent's
        }
        case kLiteral: {
          const int r = Literal(s, b);
          if (r >= 0) return r == 1;
          continue;
        }
      }
      return false;
    }
  }

  // The value can end here, and so can every frame under it (down to the root).
  bool CanEnd(const Stack& s) const {
    const Frame& f = s.frames.back();
    if (f.type == kRoot) return f.phase == kAfter;
    if (s.frames.size() != 2) return false;
    if (f.type == kNumber) return NumberDone(s);
    if (f.type == kLiteral) return LiteralDone(f);
    return false;
  }

  // The greedy walk of JsonMatcher::Closing on one alternative.
  std::optional<std::string> Closing(Stack s, size_t limit) const {
    std::string out;
    while (!CanEnd(s)) {
      if (out.size() >= limit) return std::nullopt;
      // The first byte of Toward's that s takes; where an anyOf begins, the
      // alternative with the shortest instance among those that take it.
      bool moved = false;
      for (const char c : Toward(s)) {
        const uint8_t b = static_cast<uint8_t>(c);
        std::vector<Stack> forks, none, took;
        Stack t = s;
        if (Feed(t, b, &forks)) took.push_back(std::move(t));
        for (Stack& f : forks)
          if (Feed(f, b, &none)) took.push_back(std::move(f));
        if (took.empty()) continue;
        const auto shortest = [&](const Stack& x) { return N(x.frames.back().node).shortest; };
        s = std::move(*std::min_element(
            took.begin(), took.end(),
            [&](const Stack& x, const Stack& y) { return shortest(x) < shortest(y); }));
        out += c;
        moved = true;
        break;
      }
      if (!moved) return std::nullopt;
    }
    return out;
  }

  bool Finished(const Stack& s) const {
    return s.frames.back().type == kRoot && s.frames.back().phase == kAfter;
  }

  uint64_t PlainRoom(const Stack& s) const {
    const Frame& f = s.frames.back();
    if (f.phase != kStrText || f.utf8_need != 0) return 0;
    if (f.type == kString) return N(f.node).max_length - f.count;
    // A key that may still be an extra one takes any such character.
    if (f.type == kKey && N(f.node).additional >= 0) return UINT64_MAX;
    return 0;
  }

 private:
  const SchemaNode& N(int i) const { return g_.nodes[static_cast<size_t>(i)]; }

  // The bytes that bring s nearer its end, best first (Closing's walk feeds
  // the first that s takes).
  std::string Toward(const Stack& s) const {
    const Frame& f = s.frames.back();
    const SchemaNode& n = N(f.node);
    const auto after_value = [&] {  // the parent's bytes, as if this value had ended
      Stack up = s;
      ValueDone(up);
      return Toward(up);
    };
    switch (f.type) {
      case kRoot:
        return f.phase == kBefore ? Opening(f.node) : "";
      case kObject: {
        const bool can_close = (f.seen & RequiredMask(n)) == RequiredMask(n);
        switch (f.phase) {
          case kObjStart:
            return "{";
          case kObjOpen:
            return can_close ? "}" : "\"";
          case kObjComma:
            return "\"";
          case kObjKeyDone:
            return ":";
          case kObjColon:
            return Opening(f.member >= 0 ? n.properties[static_cast<size_t>(f.member)].node
                                         : n.additional);
          default:  // kObjValueDone
            return can_close ? "}" : ",";
        }
      }
      case kKey: {
        // The first unseen required key still spelled, else the shortest unseen one.
        const Frame& obj = s.frames[s.frames.size() - 2];
        int pick = -1;
        for (size_t i = 0; i < n.properties.size(); ++i) {
          if (!(f.alive & Bit(i)) || (obj.seen & Bit(i))) continue;
          const auto& p = n.properties[i];
          if (pick < 0) {
            pick = static_cast<int>(i);
            continue;
          }
          const auto& q = n.properties[static_cast<size_t>(pick)];
          if (p.required != q.required ? p.required : p.key.size() < q.key.size())
            pick = static_cast<int>(i);
        }
        if (pick >= 0) {
          const std::string& key = n.properties[static_cast<size_t>(pick)].key;
          return f.pos < key.size() ? std::string(1, key[f.pos]) : "\"";
        }
        // An extra key ends (or, spelling a seen one, goes on).
        return f.utf8_need > 0 ? std::string(1, static_cast<char>(f.utf8_lo)) : "\"a";
      }
      case kArray:
        if (f.phase == kArrStart) return "[";
        if (f.count < n.min_items) return f.phase == kArrValueDone ? "," : Opening(n.items);
        return f.phase == kArrComma ? Opening(n.items) : "]";
      case kString:
        switch (f.phase) {
          case kStrStart:
            return "\"";
          case kStrText:
            if (f.utf8_need > 0) return std::string(1, static_cast<char>(f.utf8_lo));
            return f.count < n.min_length ? "a" : "\"";
          case kStrEscape:
            return "n";
          default:
            return "0";  // a \u escape's hex digits
        }
      case kNumber:
        return NumberDone(s) ? after_value() : "0123456789.-";
      case kLiteral: {
        if (LiteralDone(f)) return after_value();
        const std::string* best = nullptr;
        for (size_t i = 0; i < n.literals.size(); ++i)
          if ((f.alive & Bit(i)) && (!best || n.literals[i].size() < best->size()))
            best = &n.literals[i];
        return best && f.pos < best->size() ? std::string(1, (*best)[f.pos]) : "";
      }
    }
    return "";
  }

  // The first bytes of a value of `node`: its alternative with the shortest instance's.
  std::string Opening(int node) const {
    std::vector<int> concrete;
    Expand(node, &concrete, 0);
    if (concrete.empty()) return "";
    const int best = *std::min_element(concrete.begin(), concrete.end(),
                                       [&](int a, int b) { return N(a).shortest < N(b).shortest; });
    const SchemaNode& n = N(best);
    switch (n.kind) {
      case Kind::kObject:
        return "{";
      case Kind::kArray:
        return "[";
      case Kind::kString:
        return "\"";
      case Kind::kNumber:
        return "0123456789-";
      case Kind::kLiterals: {
        const auto it = std::min_element(
            n.literals.begin(), n.literals.end(),
            [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
        return it->substr(0, 1);
      }
      case Kind::kAnyOf:
        break;
    }
    return "";
  }

  // Begins a value of `node` on s: its frame, before its first byte; the
  // other alternatives of an anyOf as copies in `forks`.
  // False: no alternative (only an anyOf nested past Expand's depth).
  bool Push(Stack& s, int node, std::vector<Stack>* forks) const {
    std::vector<int> concrete;
    Expand(node, &concrete, 0);
    if (concrete.empty()) return false;
    const size_t base = s.frames.size();
    for (size_t i = 1; i < concrete.size() && forks->size() < kMaxStacks; ++i) {
      forks->push_back(s);
      forks->back().frames.resize(base);
      forks->back().frames.push_back(Start(concrete[i]));
      forks->back().number_len = 0;
    }
    s.frames.push_back(Start(concrete[0]));
    s.number_len = 0;
    return true;
  }

  void Expand(int node, std::vector<int>* out, int depth) const {
    const SchemaNode& n = N(node);
    if (n.kind != Kind::kAnyOf) {
      out->push_back(node);
      return;
    }
    if (depth > 32) return;  // an anyOf of itself: its other alternatives suffice
    for (int a : n.alternatives) Expand(a, out, depth + 1);
  }

  Frame Start(int node) const {
    Frame f;
    f.node = node;
    switch (N(node).kind) {
      case Kind::kObject:
        f.type = kObject;
        break;
      case Kind::kArray:
        f.type = kArray;
        break;
      case Kind::kString:
        f.type = kString;
        break;
      case Kind::kNumber:
        f.type = kNumber;
        break;
      case Kind::kLiterals:
        f.type = kLiteral;
        f.alive = N(node).literals.size() == 64 ? ~uint64_t{0} : Bit(N(node).literals.size()) - 1;
        break;
      case Kind::kAnyOf:
        break;  // Expand never gives one
    }
    return f;
  }

  // A value just ended: the frame that held it moves on.
  void ValueDone(Stack& s) const {
    s.frames.pop_back();
    Frame& p = s.frames.back();
    p.ws = 0;
    if (p.type == kObject) {
      if (p.member >= 0) p.seen |= Bit(static_cast<size_t>(p.member));
      p.phase = kObjValueDone;
    } else if (p.type == kArray) {
      ++p.count;
      p.phase = kArrValueDone;
    }  // kRoot: already kAfter
  }

  uint64_t RequiredMask(const SchemaNode& n) const {
    uint64_t m = 0;
    for (size_t i = 0; i < n.properties.size(); ++i)
      if (n.properties[i].required) m |= Bit(i);
    return m;
  }
  // Another key may come: an unseen property, or any extra key.
  bool KeyPossible(const Frame& f) const {
    const SchemaNode& n = N(f.node);
    const uint64_t all = n.properties.size() == 64 ? ~uint64_t{0} : Bit(n.properties.size()) - 1;
    return n.additional >= 0 || (f.seen & all) != all;
  }

  bool Object(Stack& s, uint8_t b, std::vector<Stack>* forks) const {
    Frame& f = s.frames.back();
    const SchemaNode& n = N(f.node);
    if (f.phase == kObjStart) {
      if (b != '{') return false;
      f.phase = kObjOpen;
      return true;
    }
    if (IsWs(b)) return ++f.ws <= kMaxWhitespace;
    const bool can_close = (f.seen & RequiredMask(n)) == RequiredMask(n);
    switch (f.phase) {
      case kObjOpen:
      case kObjComma:
        if (b == '}' && f.phase == kObjOpen && can_close) break;
        if (b != '"' || !KeyPossible(f)) return false;
        {
          Frame k;
          k.type = kKey;
          k.node = f.node;
          k.phase = kStrText;
          k.alive = n.properties.size() == 64 ? ~uint64_t{0} : Bit(n.properties.size()) - 1;
          f.ws = 0;
          s.frames.push_back(k);
        }
        return true;
      case kObjKeyDone:
        if (b != ':') return false;
        f.phase = kObjColon, f.ws = 0;
        return true;
      case kObjColon: {
        const int node =
            f.member >= 0 ? n.properties[static_cast<size_t>(f.member)].node : n.additional;
        return Push(s, node, forks) && Feed(s, b, forks);
      }
      case kObjValueDone:
        if (b == ',' && KeyPossible(f)) {
          f.phase = kObjComma, f.ws = 0;
          return true;
        }
        if (b == '}' && can_close) break;
        return false;
    }
    // '}': the object ends.
    ValueDone(s);
    return true;
  }

  // A key: one of the object's declared keys, byte for byte as its schema
  // spells it, or (where additionalProperties allows) any other text
  // without escapes. The phase is kStrText while it may still be another
  // key, kStrStart once only a declared one can be.
  bool Key(Stack& s, uint8_t b) const {
    Frame& k = s.frames.back();
    const Frame& obj = s.frames[s.frames.size() - 2];
    const SchemaNode& n = N(k.node);
    const bool extras = n.additional >= 0 && k.phase == kStrText;
    if (b == '"' && k.utf8_need == 0) {
      // Which declared key, if any, the text is; a seen one may not repeat.
      int member = -1;
      for (size_t i = 0; i < n.properties.size(); ++i)
        if ((k.alive & Bit(i)) && n.properties[i].key.size() == k.pos) member = static_cast<int>(i);
      if (member >= 0 ? (obj.seen & Bit(static_cast<size_t>(member))) != 0 : !extras) return false;
      s.frames.pop_back();
      Frame& o = s.frames.back();
      o.member = static_cast<int16_t>(member);
      o.phase = kObjKeyDone, o.ws = 0;
      return true;
    }
    // The declared keys that go on with b (seen ones too, while an extra
    // key is possible: it must not spell one of them).
    uint64_t alive = 0, unseen = 0;
    for (size_t i = 0; i < n.properties.size(); ++i) {
      if (!(k.alive & Bit(i))) continue;
      const std::string& key = n.properties[i].key;
      if (k.pos < key.size() && static_cast<uint8_t>(key[k.pos]) == b) {
        alive |= Bit(i);
        if (!(obj.seen & Bit(i))) unseen |= Bit(i);
      }
    }
    bool extra_ok = extras && b != '\\' && b >= 0x20 && b != '"';
    uint8_t need = k.utf8_need, lo = k.utf8_lo, hi = k.utf8_hi;
    if (extra_ok) extra_ok = Utf8(b, &need, &lo, &hi);
    if (!unseen && !extra_ok) return false;
    ++k.pos;
    if (extra_ok) {
      k.alive = alive;
      k.utf8_need = need, k.utf8_lo = lo, k.utf8_hi = hi;
    } else {  // only a declared key (valid text, matched byte for byte) from here
      k.alive = unseen;
      k.phase = kStrStart;
      k.utf8_need = 0;
    }
    return true;
  }

  // One byte of UTF-8 content: false if it cannot be.
  static bool Utf8(uint8_t b, uint8_t* need, uint8_t* lo, uint8_t* hi) {
    if (*need > 0) {
      if (b < *lo || b > *hi) return false;
      --*need, *lo = 0x80, *hi = 0xBF;
      return true;
    }
    if (b < 0x80) return true;
    if (b >= 0xC2 && b <= 0xDF) return *need = 1, true;
    if (b >= 0xE0 && b <= 0xEF) {
      *need = 2;
      if (b == 0xE0) *lo = 0xA0;  // no overlong forms
      if (b == 0xED) *hi = 0x9F;  // no surrogates
      return true;
    }
    if (b >= 0xF0 && b <= 0xF4) {
      *need = 3;
      if (b == 0xF0) *lo = 0x90;
      if (b == 0xF4) *hi = 0x8F;  // nothing past U+10FFFF
      return true;
    }
    return false;
  }

  bool Array(Stack& s, uint8_t b, std::vector<Stack>* forks) const {
    Frame& f = s.frames.back();
    const SchemaNode& n = N(f.node);
    if (f.phase == kArrStart) {
      if (b != '[') return false;
      f.phase = kArrOpen;
      return true;
    }
    if (IsWs(b)) return ++f.ws <= kMaxWhitespace;
    if (b == ']' && f.phase != kArrComma && f.count >= n.min_items) {
      ValueDone(s);
      return true;
    }
    if (f.phase == kArrValueDone) {
      if (b != ',' || f.count >= n.max_items) return false;
      f.phase = kArrComma, f.ws = 0;
      return true;
    }
    if (f.count >= n.max_items) return false;
    return Push(s, n.items, forks) && Feed(s, b, forks);
  }

  bool String(Stack& s, uint8_t b) const {
    Frame& f = s.frames.back();
    const SchemaNode& n = N(f.node);
    switch (f.phase) {
      case kStrStart:
        if (b != '"') return false;
        f.phase = kStrText;
        return true;
      case kStrText:
        if (b == '"' && f.utf8_need == 0) {
          if (f.count < n.min_length) return false;
          ValueDone(s);
          return true;
        }
        if (b < 0x20 || b == '"') return false;
        if (f.utf8_need == 0 && f.count >= n.max_length) return false;  // a new character
        if (b == '\\') {
          f.phase = kStrEscape;
          return f.utf8_need == 0;
        }
        if (f.utf8_need == 0) ++f.count;
        return Utf8(b, &f.utf8_need, &f.utf8_lo, &f.utf8_hi);
      case kStrEscape:
        if (b == 'u') {
          f.phase = kStrHex0;
          return true;
        }
        if (!std::strchr("\"\\/bfnrt", b) || b == 0) return false;
        ++f.count, f.phase = kStrText;
        return true;
      default: {  // \u and 0-3 hex digits
        if (!IsHex(b)) return false;
        const int i = f.phase - kStrHex0;
        // No surrogates: \uD800-\uDFFF.
        if (i == 0) f.pos = (b == 'd' || b == 'D');
        if (i == 1 && f.pos && !((b >= '0' && b <= '7'))) return false;
        if (i == 3) {
          ++f.count, f.phase = kStrText;
          return true;
        }
        ++f.phase;
        return true;
      }
    }
  }

  bool NumberDone(const Stack& s) const {
    const Frame& f = s.frames.back();
    if (f.phase != kNumZero && f.phase != kNumInt && f.phase != kNumFrac && f.phase != kNumExp)
      return false;
    const SchemaNode& n = N(f.node);
    if (!n.bounded()) return true;
    return InBounds(n, std::strtod(std::string(s.number, s.number_len).c_str(), nullptr));
  }

  // Can the number whose text is `t` (a prefix) still end within n's bounds?
  // Its reachable values: after "I.F", [I.F, I.F + 10^-|F|); after digits
  // I, the union over k of [I 10^k, (I + 1) 10^k) (only [0, 1) after "0");
  // mirrored after '-'. An integer's bounds are whole, so a half-open
  // interval with whole ends meets them exactly when it holds an integer
  // within them.
  bool Reachable(const SchemaNode& n, std::string_view t) const {
    const bool negative = !t.empty() && t[0] == '-';
    if (negative) t.remove_prefix(1);
    const auto overlaps = [&](double a, double b) {
      return negative ? OverlapsNegative(n, a, b) : Overlaps(n, a, b);
    };
    if (t.empty()) return overlaps(0, 1.0 / 0.0);
    const size_t point = t.find('.');
    if (point != std::string_view::npos) {
      const size_t frac = t.size() - point - 1;
      const double lo = std::strtod(std::string(t).append(frac == 0 ? "0" : "").c_str(), nullptr);
      return overlaps(lo, lo + std::pow(10.0, -static_cast<double>(frac)));
    }
    const double i = std::strtod(std::string(t).c_str(), nullptr);
    if (t == "0") return overlaps(0, 1);
    for (double scale = 1; i * scale <= 1e17; scale *= 10)
      if (overlaps(i * scale, (i + 1) * scale)) return true;
    return false;
  }

  // 1: consumed; 0: refused; -1: the number ended before b (popped; b is the parent's).
  int Number(Stack& s, uint8_t b) const {
    Frame& f = s.frames.back();
    const SchemaNode& n = N(f.node);
    const bool bounded = n.bounded();
    const size_t max_digits = bounded ? kBoundedDigits : kFreeDigits;
    uint8_t next = 0xFF;
    switch (f.phase) {
      case kNumStart:
        if (b == '-')
          next = kNumMinus;
        else if (b == '0')
          next = kNumZero;
        else if (IsDigit(b))
          next = kNumInt;
        break;
      case kNumMinus:
        if (b == '0')
          next = kNumZero;
        else if (IsDigit(b))
          next = kNumInt;
        break;
      case kNumZero:
      case kNumInt:
        if (IsDigit(b) && f.phase == kNumInt && f.pos < max_digits)
          next = kNumInt;
        else if (b == '.' && !n.integer)
          next = kNumPoint;
        else if ((b == 'e' || b == 'E') && !n.integer && !bounded)
          next = kNumE;
        break;
      case kNumPoint:
        if (IsDigit(b)) next = kNumFrac;
        break;
      case kNumFrac:
        if (IsDigit(b) && f.pos < max_digits)
          next = kNumFrac;
        else if ((b == 'e' || b == 'E') && !bounded)
          next = kNumE;
        break;
      case kNumE:
        if (b == '+' || b == '-')
          next = kNumESign;
        else if (IsDigit(b))
          next = kNumExp;
        break;
      case kNumESign:
        if (IsDigit(b)) next = kNumExp;
        break;
      case kNumExp:
        if (IsDigit(b) && f.pos < kExpDigits) next = kNumExp;
        break;
    }
    if (next == 0xFF) {
      if (!NumberDone(s)) return 0;
      ValueDone(s);
      return -1;
    }
    if (bounded) {
      std::string text(s.number, s.number_len);
      text += static_cast<char>(b);
      if (!Reachable(n, text)) return 0;
    }
    f.pos = next == f.phase ? f.pos + 1 : (next == kNumInt || next == kNumFrac || next == kNumExp);
    f.phase = next;
    s.number[s.number_len++] = static_cast<char>(b);
    return 1;
  }

  bool LiteralDone(const Frame& f) const {
    const auto& lits = N(f.node).literals;
    for (size_t i = 0; i < lits.size(); ++i)
      if ((f.alive & Bit(i)) && lits[i].size() == f.pos) return true;
    return false;
  }

  int Literal(Stack& s, uint8_t b) const {
    Frame& f = s.frames.back();
    const auto& lits = N(f.node).literals;
    uint64_t alive = 0;
    for (size_t i = 0; i < lits.size(); ++i)
      if ((f.alive & Bit(i)) && f.pos < lits[i].size() && static_cast<uint8_t>(lits[i][f.pos]) == b)
        alive |= Bit(i);
    if (alive) {
      f.alive = alive, ++f.pos;
      // A literal that cannot go on ends now, so that its parent's state is current.
      bool more = false;
      for (size_t i = 0; i < lits.size(); ++i)
        more = more || ((alive & Bit(i)) && lits[i].size() > f.pos);
      if (!more) ValueDone(s);
      return 1;
    }
    if (!LiteralDone(f)) return 0;
    ValueDone(s);
    return -1;
  }

  const JsonGrammar& g_;
};

}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> g) : g_(g.get()), keep_(std::move(g)) {
  Stack s;
  Frame root;
  root.type = kRoot;
  root.node = g_->root;
  s.frames.push_back(root);
  stacks_.push_back(std::move(s));
}

bool JsonMatcher::Advance(uint8_t byte) {
  const Machine m(*g_);
  scratch_.clear();
  size_t kept = 0;
  for (size_t i = 0; i < stacks_.size(); ++i) {
    std::vector<Stack> forks;
    if (m.Feed(stacks_[i], byte, &forks)) {
      if (kept != i) stacks_[kept] = std::move(stacks_[i]);
      ++kept;
    }
    // A fork's innermost frame is a value's start, which pushes nothing.
    std::vector<Stack> none;
    for (Stack& f : forks)
      if (m.Feed(f, byte, &none)) scratch_.push_back(std::move(f));
  }
  stacks_.resize(kept);
  for (Stack& f : scratch_)
    if (stacks_.size() < kMaxStacks) stacks_.push_back(std::move(f));
  return !stacks_.empty();
}

bool JsonMatcher::AdvanceFrom(const JsonMatcher& from, uint8_t byte) {
  stacks_ = from.stacks_;
  return Advance(byte);
}

bool JsonMatcher::Advance(std::string_view bytes) {
  for (char c : bytes)
    if (!Advance(static_cast<uint8_t>(c))) return false;
  return true;
}

bool JsonMatcher::complete() const {
  const Machine m(*g_);
  for (const Stack& s : stacks_)
    if (m.CanEnd(s)) return true;
  return false;
}

bool JsonMatcher::finished() const {
  const Machine m(*g_);
  for (const Stack& s : stacks_)
    if (!m.Finished(s)) return false;
  return !stacks_.empty();
}

std::optional<std::string> JsonMatcher::Closing(size_t limit) const {
  const Machine m(*g_);
  std::optional<std::string> best;
  for (const Stack& s : stacks_) {
    auto c = m.Closing(s, limit);
    if (c && (!best || c->size() < best->size())) best = std::move(c);
  }
  return best;
}

uint64_t JsonMatcher::PlainRoom() const {
  const Machine m(*g_);
  uint64_t room = 0;
  for (const Stack& s : stacks_) room = std::max(room, m.PlainRoom(s));
  return room;
}

}  // namespace waste::grammar
