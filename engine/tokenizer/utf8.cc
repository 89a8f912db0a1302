#include "engine/tokenizer/utf8.h"

#include <array>
#include <cstdint>

namespace waste::tokenizer {
namespace {

// The length of the well-formed sequence starting at s[i], or, when it is
// ill-formed, -(length of its maximal subpart) (at least 1).
int SequenceAt(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = at(i);
  if (b0 < 0x80) return 1;
  int need;                      // continuation bytes after the lead
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the first continuation byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 == 0xE0) {
    need = 2, lo = 0xA0;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    need = 2;
  } else if (b0 == 0xED) {
    need = 2, hi = 0x9F;  // no surrogates
  } else if (b0 == 0xF0) {
    need = 3, lo = 0x90;  // no overlongs
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    need = 3;
  } else if (b0 == 0xF4) {
    need = 3, hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;  // 80..C1, F5..FF never start a sequence
  }
  size_t k = i + 1;
  for (int c = 0; c < need; ++c, ++k) {
    if (k >= s.size()) return -static_cast<int>(k - i);
    const uint8_t b = at(k);
    const uint8_t l = c == 0 ? lo : 0x80, h = c == 0 ? hi : 0xBF;
    if (b < l || b > h) return -static_cast<int>(k - i);
  }
  return need + 1;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  return ValidUtf8Prefix(s) == s.size();
}

size_t ValidUtf8Prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII eight bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w = 0;
      for (int k = 0; k < 8; ++k)
        w |= static_cast<uint64_t>(static_cast<uint8_t>(s[i + k])) << (8 * k);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const int n = SequenceAt(s, i);
    if (n < 0) return i;
    i += static_cast<size_t>(n);
  }
  return s.size();
}

std::string ReplaceInvalidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    const int n = SequenceAt(s, i);
    if (n > 0) {
      out.append(s.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else {
      out += "\xEF\xBF\xBD";
      i += static_cast<size_t>(-n);
    }
  }
  return out;
}

std::optional<std::string> ByteLevelDecode(std::string_view token) {
  // The alphabet's inverse: code point -> byte, for code points 0..0x143.
  static const std::array<int16_t, 0x144> kByteOf = [] {
    std::array<int16_t, 0x144> m{};
    m.fill(-1);
    uint32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      m[self ? static_cast<uint32_t>(b) : extra++] = static_cast<int16_t>(b);
    }
    return m;
  }();
  std::string out;
  for (size_t i = 0; i < token.size();) {
    const uint8_t c = static_cast<uint8_t>(token[i]);
    uint32_t cp;
    size_t n;
    if (c < 0x80) {
      cp = c, n = 1;
    } else if ((c >> 5) == 6) {
      cp = c & 31, n = 2;
    } else {
      return std::nullopt;  // every code point of the alphabet is below U+0800
    }
    if (i + n > token.size()) return std::nullopt;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<uint8_t>(token[i + k]) & 0xC0) != 0x80) return std::nullopt;
      cp = (cp << 6) | (static_cast<uint8_t>(token[i + k]) & 63);
    }
    if (cp >= kByteOf.size() || kByteOf[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(kByteOf[cp]));
    i += n;
  }
  return out;
}

}  // namespace waste::tokenizer
