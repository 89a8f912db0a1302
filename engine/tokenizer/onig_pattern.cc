#include "engine/tokenizer/onig_pattern.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <vector>

#include "engine/tokenizer/pretokenizer.h"  // kWhiteSpace

namespace waste::tokenizer {
namespace {

// Unicode's general categories: the major ones and the minor ones each
// holds. They partition every code point.
struct Major {
  const char* name;
  std::vector<const char*> minors;
};
const std::vector<Major>& Categories() {
  static const std::vector<Major> k = {
      {"L", {"Lu", "Ll", "Lt", "Lm", "Lo"}},
      {"M", {"Mn", "Mc", "Me"}},
      {"N", {"Nd", "Nl", "No"}},
      {"P", {"Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"}},
      {"S", {"Sm", "Sc", "Sk", "So"}},
      {"Z", {"Zs", "Zl", "Zp"}},
      {"C", {"Cc", "Cf", "Cs", "Co", "Cn"}},
  };
  return k;
}

// The minor categories a general-category name covers; empty if `name` is
// not one.
std::vector<std::string> MinorsOf(std::string_view name) {
  for (const Major& m : Categories()) {
    if (name == m.name) return {m.minors.begin(), m.minors.end()};
    for (const char* n : m.minors)
      if (name == n) return {n};
  }
  return {};
}

// Oniguruma's \w: Letter, Mark, Decimal_Number, Connector_Punctuation.
constexpr const char* kWord = R"(\p{L}\p{M}\p{Nd}\p{Pc})";

class Translator {
 public:
  explicit Translator(std::string_view s) : s_(s) {}

  Result<std::string> Run() {
    std::string out;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '\\') {
        auto e = Escape(/*in_class=*/false);
        if (!e.ok()) return e.status();
        out += *e;
      } else if (c == '[') {
        auto cls = Class();
        if (!cls.ok()) return cls.status();
        out += *cls;
      } else if (c == '(') {
        auto g = Group();
        if (!g.ok()) return g.status();
        out += *g;
      } else if (c == '^') {
        out += R"((?<![^\n]))";  // a line start in Oniguruma, whatever PCRE2's newline
        ++i_;
      } else if (c == '$') {
        out += R"((?![^\n]))";  // a line end
        ++i_;
      } else if (c == '.') {
        out += R"([^\n])";  // Oniguruma's dot: anything but a newline
        ++i_;
      } else if (c == '}' && i_ + 1 < s_.size() && s_[i_ + 1] == '+') {
        // PCRE2 reads {n,m}+ as possessive, Oniguruma as a repeat of it.
        return Refuse(i_, "\"}+\" (Oniguruma repeats the interval, PCRE2 makes it possessive)");
      } else if (c == '{' && i_ + 1 < s_.size() && s_[i_ + 1] == ',') {
        out += "{0";  // Oniguruma's {,n} is {0,n}; PCRE2 10.42 reads it as text
        ++i_;
      } else {
        out += c;
        ++i_;
      }
    }
    return out;
  }

 private:
  Status Refuse(size_t at, const std::string& why) const {
    return Status::Error("offset " + std::to_string(at) + ": " + why);
  }

  // After '(': lookarounds, atomic and non-capturing groups pass; flags are
  // read as Oniguruma means them.
  Result<std::string> Group() {
    const size_t at = i_++;
    if (i_ >= s_.size() || s_[i_] != '?') return std::string("(");
    ++i_;
    for (const char* p : {":", "=", "!", "<=", "<!", ">"}) {
      const std::string_view pv(p);
      if (s_.substr(i_, pv.size()) == pv) {
        i_ += pv.size();
        return "(?" + std::string(pv);
      }
    }
    std::string flags;
    while (i_ < s_.size() && s_[i_] != ':' && s_[i_] != ')') {
      const char f = s_[i_++];
      if (f == 'i' || f == 'x' || f == '-')
        flags += f;
      else
        return Refuse(at, "the group \"(?" + std::string(1, f) + "\" has no PCRE2 translation");
    }
    if (i_ >= s_.size()) return Refuse(at, "unterminated group");
    return "(?" + flags + s_[i_++];
  }

  // \p{Name} / \P{Name} after the backslash and letter (i_ at '{' or the
  // one-letter name). General categories stay; any other name is a Script
  // (\p{sc:Name}: a bare name in PCRE2 10.40+ is Script_Extensions).
  Result<std::string> Property(bool negated, size_t at) {
    std::string name;
    if (i_ < s_.size() && s_[i_] == '{') {
      const size_t close = s_.find('}', i_);
      if (close == std::string_view::npos) return Refuse(at, "unterminated \\p{");
      name = std::string(s_.substr(i_ + 1, close - i_ - 1));
      i_ = close + 1;
    } else if (i_ < s_.size()) {
      name = std::string(1, s_[i_++]);
    }
    if (name.empty() || name[0] == '^')
      return Refuse(at, "the property \"" + name + "\" has no PCRE2 translation");
    for (const char ch : name)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_')
        return Refuse(at, "the property \"" + name + "\" has no PCRE2 translation");
    const std::string p = negated ? "\\P{" : "\\p{";
    if (!MinorsOf(name).empty()) return p + name + "}";
    return p + "sc:" + name + "}";
  }

  // After '\'. In a class, \s gives the class contents and \S is refused.
  Result<std::string> Escape(bool in_class) {
    const size_t at = i_++;
    if (i_ >= s_.size()) return Refuse(at, "the pattern ends in a backslash");
    const char c = s_[i_++];
    const std::string ws = kWhiteSpace;
    switch (c) {
      case 'p':
      case 'P':
        return Property(c == 'P', at);
      case 's':
        return in_class ? ws : "[" + ws + "]";
      case 'S':
        if (in_class) return Refuse(at, "\\S inside a class has no PCRE2 translation");
        return "[^" + ws + "]";
      case 'd':
        return std::string(R"(\p{Nd})");
      case 'D':
        return std::string(R"(\P{Nd})");
      case 'w':
        return in_class ? std::string(kWord) : "[" + std::string(kWord) + "]";
      case 'W':
        if (in_class) return Refuse(at, "\\W inside a class has no PCRE2 translation");
        return "[^" + std::string(kWord) + "]";
      case 'r':
      case 'n':
      case 't':
      case 'f':
        return std::string("\\") + c;
      case 'v':
        return std::string(R"(\x{0B})");  // PCRE2's \v is a class of vertical space
      case 'x': {
        // \xHH or \x{H...}: the same in PCRE2.
        std::string out = "\\x";
        if (i_ < s_.size() && s_[i_] == '{') {
          const size_t close = s_.find('}', i_);
          if (close == std::string_view::npos) return Refuse(at, "unterminated \\x{");
          out += std::string(s_.substr(i_, close + 1 - i_));
          i_ = close + 1;
          return out;
        }
        for (int k = 0;
             k < 2 && i_ < s_.size() && std::isxdigit(static_cast<unsigned char>(s_[i_])); ++k)
          out += s_[i_++];
        return out;
      }
      case 'u': {
        std::string hex(s_.substr(i_, 4));
        if (hex.size() != 4 || !std::all_of(hex.begin(), hex.end(), [](char h) {
              return std::isxdigit(static_cast<unsigned char>(h));
            }))
          return Refuse(at, "\\u needs four hex digits");
        i_ += 4;
        return "\\x{" + hex + "}";
      }
      default:
        break;
    }
    const auto uc = static_cast<unsigned char>(c);
    if (uc < 0x80 && !std::isalnum(uc)) return std::string("\\") + c;  // an escaped symbol
    return Refuse(at, "the escape \"\\" + std::string(1, c) + "\" has no PCRE2 translation");
  }

  // From '[' to its ']'. Items pass one by one; an intersection is allowed
  // in one form, [X&&[^Y]] with X a union of general categories, which is
  // the negated class of the other categories and Y.
  Result<std::string> Class() {
    const size_t at = i_++;
    bool negated = false;
    if (i_ < s_.size() && s_[i_] == '^') negated = true, ++i_;
    std::string body;
    std::vector<std::string> categories;  // the \p{GC} items, for an intersection
    bool only_categories = true;
    while (true) {
      if (i_ >= s_.size()) return Refuse(at, "unterminated class");
      const char c = s_[i_];
      if (c == ']') {
        ++i_;
        if (body.empty()) return Refuse(at, "an empty class");
        return std::string(negated ? "[^" : "[") + body + "]";
      }
      if (c == '&' && i_ + 1 < s_.size() && s_[i_ + 1] == '&') {
        if (negated || !only_categories || categories.empty() || s_.substr(i_ + 2, 2) != "[^")
          return Refuse(at,
                        "this class intersection has no PCRE2 translation (only "
                        "[\\p{..}...&&[^...]] has)");
        i_ += 3;  // at the '^' of the inner class
        ++i_;
        std::string inner;
        while (i_ < s_.size() && s_[i_] != ']') {
          if (s_[i_] == '[' || s_[i_] == '&')
            return Refuse(at, "this class intersection has no PCRE2 translation (nested)");
          if (s_[i_] == '\\') {
            auto e = Escape(true);
            if (!e.ok()) return e.status();
            inner += *e;
          } else {
            inner += s_[i_++];
          }
        }
        if (s_.substr(i_, 2) != "]]")
          return Refuse(at, "this class intersection has no PCRE2 translation");
        i_ += 2;
        std::set<std::string> have;
        for (const std::string& name : categories)
          for (const std::string& m : MinorsOf(name)) have.insert(m);
        std::string rest;
        for (const Major& m : Categories())
          for (const char* n : m.minors)
            if (!have.count(n)) rest += "\\p{" + std::string(n) + "}";
        return "[^" + rest + inner + "]";
      }
      if (c == '[') {
        if (s_.substr(i_, 2) == "[:") return Refuse(i_, "POSIX brackets have no PCRE2 translation");
        return Refuse(i_, "a nested class has no PCRE2 translation");
      }
      if (c == '\\') {
        const size_t before = i_;
        auto e = Escape(true);
        if (!e.ok()) return e.status();
        const std::string_view raw = s_.substr(before, i_ - before);
        if (raw.size() > 4 && raw.substr(0, 3) == "\\p{" &&
            !MinorsOf(raw.substr(3, raw.size() - 4)).empty())
          categories.emplace_back(raw.substr(3, raw.size() - 4));
        else
          only_categories = false;
        body += *e;
        continue;
      }
      only_categories = false;
      body += c;
      ++i_;
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

Result<std::string> TranslateOnigPattern(std::string_view onig) {
  return Translator(onig).Run();
}

std::string QuotePcre2(std::string_view literal) {
  std::string out;
  for (const char c : literal) {
    const auto uc = static_cast<unsigned char>(c);
    if (uc < 0x80 && !std::isalnum(uc)) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace waste::tokenizer
