#include "serve/generic_reply.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "engine/tokenizer/chat_generic.h"

namespace waste::serve {
namespace {

using namespace chat_generic;

constexpr const char* kSpace = " \t\r\n";  // JSON's white space

// Which of `options` `buf` begins with: its index; -1: none yet, but one may
// (buf is a prefix of it); -2: none can.
int Expect(std::string_view buf, std::initializer_list<std::string> options) {
  int i = 0, may = -2;
  for (const std::string& o : options) {
    if (buf.starts_with(o)) return i;
    if (o.starts_with(buf)) may = -1;
    ++i;
  }
  return may;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Four hex digits at s[at]; -1 if they are not.
int Hex4(std::string_view s, size_t at) {
  int v = 0;
  for (size_t i = at; i < at + 4; ++i) {
    const char c = s[i];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// A JSON string's text from s[0] (after its opening quote), unescaped onto
// `out` as far as whole escapes go. Returns the bytes read; *closed when the
// closing quote was (it is read too).
size_t Unescape(std::string_view s, std::string* out, bool* closed) {
  *closed = false;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"') {
      *closed = true;
      return i + 1;
    }
    if (c != '\\') {
      *out += c;
      ++i;
      continue;
    }
    if (i + 1 >= s.size()) break;
    const char e = s[i + 1];
    if (e != 'u') {
      const char* from = "\"\\/bfnrt";
      const char* to = "\"\\/\b\f\n\r\t";
      const size_t k = std::string_view(from).find(e);
      *out += k == std::string_view::npos ? e : to[k];
      i += 2;
      continue;
    }
    if (i + 6 > s.size()) break;
    int cp = Hex4(s, i + 2);
    size_t used = 6;
    if (cp >= 0xD800 && cp < 0xDC00) {  // a high surrogate: its low one follows
      if (i + 12 > s.size()) break;
      const int low = s[i + 6] == '\\' && s[i + 7] == 'u' ? Hex4(s, i + 8) : -1;
      if (low >= 0xDC00 && low < 0xE000) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        used = 12;
      } else {
        cp = 0xFFFD;
      }
    } else if (cp < 0) {  // not four hex digits: only `\u` is read, so what follows stays whole
      cp = 0xFFFD;
      used = 2;
    } else if (cp >= 0xDC00 && cp < 0xE000) {
      cp = 0xFFFD;
    }
    AppendUtf8(static_cast<uint32_t>(cp), out);
    i += used;
  }
  return i;
}

}  // namespace

void GenericReply::Feed(std::string_view bytes, std::vector<ReplyEvent>* out) {
  buf_ += bytes;
  Step(out);
}

void GenericReply::Step(std::vector<ReplyEvent>* out) {
  const auto text = [&](std::string t) {
    if (!t.empty()) out->push_back({ReplyEvent::Kind::kText, std::move(t), -1, "", ""});
  };
  for (;;) {
    switch (state_) {
      case State::kOpen:
      case State::kAfterCall: {
        const bool open = state_ == State::kOpen;
        // The arguments' grammar lets white space follow them.
        if (!open) buf_.erase(0, std::min(buf_.find_first_not_of(kSpace), buf_.size()));
        const int which = open
                              ? Expect(buf_, {std::string(kCallsOpen) + std::string(kCallName),
                                              std::string(kResponseOpen)})
                              : Expect(buf_, {std::string(kCallClose) + std::string(kCallsBetween) +
                                                  std::string(kCallName),
                                              std::string(kCallClose) + std::string(kCallsClose)});
        if (which == -1) return;
        if (which == -2) {
          state_ = State::kRaw;
          break;
        }
        const size_t n =
            open ? (which == 0 ? kCallsOpen.size() + kCallName.size() : kResponseOpen.size())
                 : (which == 0 ? kCallClose.size() + kCallsBetween.size() + kCallName.size()
                               : kCallClose.size() + kCallsClose.size());
        buf_.erase(0, n);
        state_ = which == 0 ? State::kName : open ? State::kQuote : State::kDone;
        break;
      }
      case State::kQuote: {  // the response's string, after any white space
        buf_.erase(0, std::min(buf_.find_first_not_of(kSpace), buf_.size()));
        if (buf_.empty()) return;
        if (buf_[0] != '"') {
          state_ = State::kRaw;
          break;
        }
        buf_.erase(0, 1);
        state_ = State::kResponse;
        break;
      }
      case State::kName: {
        if (buf_.empty()) return;
        if (buf_[0] != '"') {
          state_ = State::kRaw;
          break;
        }
        std::string name;
        bool closed = false;
        const size_t n = 1 + Unescape(std::string_view(buf_).substr(1), &name, &closed);
        if (!closed) return;
        const int after = Expect(std::string_view(buf_).substr(n), {std::string(kCallArgs)});
        if (after == -1) return;
        if (after == -2 || name.empty()) {  // no call has an empty name
          state_ = State::kRaw;
          break;
        }
        out->push_back({ReplyEvent::Kind::kToolCallStart, "", calls_, name, NewToolCallId()});
        buf_.erase(0, n + kCallArgs.size());
        state_ = State::kArgs;
        scanned_ = 0, depth_ = 0, in_string_ = escaped_ = false;
        break;
      }
      case State::kArgs: {
        // White space before the object is not the arguments'.
        if (depth_ == 0 && scanned_ == 0)
          buf_.erase(0, std::min(buf_.find_first_not_of(kSpace), buf_.size()));
        bool ended = false;
        for (; scanned_ < buf_.size() && !ended; ++scanned_) {
          const char c = buf_[scanned_];
          if (in_string_) {
            if (escaped_)
              escaped_ = false;
            else if (c == '\\')
              escaped_ = true;
            else if (c == '"')
              in_string_ = false;
          } else if (c == '"') {
            in_string_ = true;
          } else if (c == '{' || c == '[') {
            ++depth_;
          } else if (c == '}' || c == ']') {
            ended = --depth_ == 0;
          }
        }
        if (scanned_ > 0)
          out->push_back(
              {ReplyEvent::Kind::kToolCallArgs, buf_.substr(0, scanned_), calls_, "", ""});
        buf_.erase(0, scanned_);
        scanned_ = 0;
        if (!ended) return;
        out->push_back({ReplyEvent::Kind::kToolCallEnd, "", calls_++, "", ""});
        state_ = State::kAfterCall;
        break;
      }
      case State::kResponse: {
        std::string t;
        bool closed = false;
        buf_.erase(0, Unescape(buf_, &t, &closed));
        text(std::move(t));
        if (!closed) return;
        state_ = State::kDone;
        break;
      }
      case State::kDone:
        buf_.clear();  // the object's close
        return;
      case State::kRaw:
        text(std::exchange(buf_, {}));
        return;
    }
  }
}

void GenericReply::Finish(std::vector<ReplyEvent>* out) {
  if (state_ == State::kArgs)
    out->push_back({ReplyEvent::Kind::kToolCallEnd, "", calls_, "", ""});
  else if ((state_ == State::kOpen || state_ == State::kRaw) && !buf_.empty())
    out->push_back({ReplyEvent::Kind::kText, buf_, -1, "", ""});
  buf_.clear();
  state_ = State::kDone;
}

}  // namespace waste::serve
