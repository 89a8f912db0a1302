#include "engine/tokenizer/base64.h"

#include <cstdint>

namespace waste::tokenizer {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The 6-bit value of an alphabet character, -1 for anything else ('=' too).
int Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = uint32_t{uint8_t(bytes[i])} << 16 | uint32_t{uint8_t(bytes[i + 1])} << 8 |
                       uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out += kAlphabet[(v >> (6 * k)) & 63];
  }
  const size_t rest = bytes.size() - i;  // 0, 1 or 2 bytes left
  if (rest > 0) {
    const uint32_t v =
        uint32_t{uint8_t(bytes[i])} << 16 | (rest == 2 ? uint32_t{uint8_t(bytes[i + 1])} << 8 : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  size_t pad = 0;
  while (pad < 2 && text[text.size() - 1 - pad] == '=') ++pad;
  const std::string_view body = text.substr(0, text.size() - pad);
  std::string out;
  out.reserve(body.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : body) {
    const int v = Value(c);
    if (v < 0) return std::nullopt;  // also a third '=' or one inside
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  if (acc & ((1u << bits) - 1)) return std::nullopt;  // non-zero padding bits
  return out;
}

}  // namespace waste::tokenizer
