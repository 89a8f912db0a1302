// engine/tokenizer/base64.h: RFC 4648's test vectors, round trips of every
// short input, and the strict decoder's refusals (each kind of bad input,
// and every non-canonical spelling of one or two bytes).
#include "engine/tokenizer/base64.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>

namespace waste::tokenizer {
namespace {

const std::string kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

TEST(Base64, Rfc4648Vectors) {
  const std::pair<std::string, std::string> cases[] = {
      {"f", "Zg=="},        {"fo", "Zm8="},        {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
  };
  for (const auto& [bytes, text] : cases) {
    EXPECT_EQ(Base64Encode(bytes), text);
    EXPECT_EQ(Base64Decode(text), bytes) << text;
  }
  EXPECT_EQ(Base64Encode(""), "");
}

TEST(Base64, HighBytesAndNul) {
  EXPECT_EQ(Base64Encode(std::string("\xfb\xff\xbf", 3)), "+/+/");
  EXPECT_EQ(Base64Decode("+/+/"), std::string("\xfb\xff\xbf", 3));
  EXPECT_EQ(Base64Encode(std::string(1, '\0')), "AA==");
  EXPECT_EQ(Base64Decode("AA=="), std::string(1, '\0'));
}

TEST(Base64, RoundTripsEveryOneAndTwoByteInputAndLongerOnes) {
  for (int a = 0; a < 256; ++a) {
    const std::string one(1, static_cast<char>(a));
    ASSERT_EQ(Base64Decode(Base64Encode(one)), one) << a;
    for (int b = 0; b < 256; ++b) {
      const std::string two = one + static_cast<char>(b);
      ASSERT_EQ(Base64Decode(Base64Encode(two)), two) << a << " " << b;
    }
  }
  std::string all;
  for (int i = 0; i < 3 * 256 + 2; ++i) {
    all += static_cast<char>(i * 37 % 256);
    const std::string text = Base64Encode(all);
    ASSERT_EQ(text.size(), (all.size() + 2) / 3 * 4);
    ASSERT_EQ(Base64Decode(text), all) << all.size();
  }
}

TEST(Base64, RefusesBadInput) {
  const char* bad[] = {
      "",            // nothing
      "Zg",          // not whole groups
      "Zm9",         //
      "Zm9vY",       //
      "Zm9v!A==",    // a character outside the alphabet
      "Zm9v-_==",    // the URL-safe alphabet
      "Zm 9",        // white space
      "Zm9\n",       //
      "Zm\xc3\xa9",  // bytes above 0x7f
      "Z===",        // three '='
      "====",        //
      "Zg==Zm9v",    // padding inside
      "Z=g=",        //
      "Zh==",        // non-zero padding bits (Python reads "f")
      "Zm9=",        // likewise for "fo"
  };
  for (const char* text : bad) EXPECT_EQ(Base64Decode(text), std::nullopt) << text;
  EXPECT_EQ(Base64Decode(std::string("Zg\0=", 4)), std::nullopt);  // a NUL inside
}

// Of all 64^3 spellings "XY==" and "XYZ=", exactly the canonical ones decode
// (one per byte value and per pair of bytes), each to the bytes it encodes.
TEST(Base64, OnlyCanonicalPaddedGroupsDecode) {
  int ones = 0, twos = 0;
  for (char x : kAlphabet)
    for (char y : kAlphabet) {
      const std::string t1 = std::string{x, y} + "==";
      if (auto b = Base64Decode(t1)) {
        ++ones;
        ASSERT_EQ(b->size(), 1u);
        ASSERT_EQ(Base64Encode(*b), t1);
      }
      for (char z : kAlphabet) {
        const std::string t2 = std::string{x, y, z} + "=";
        if (auto b = Base64Decode(t2)) {
          ++twos;
          ASSERT_EQ(b->size(), 2u);
          ASSERT_EQ(Base64Encode(*b), t2);
        }
      }
    }
  EXPECT_EQ(ones, 256);
  EXPECT_EQ(twos, 65536);
}

}  // namespace
}  // namespace waste::tokenizer
