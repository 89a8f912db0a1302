// Unicode Normalization Form C (UAX #15), as tokenizers' NFC normalizer runs
// it (Qwen's tokenizer.json): canonical decomposition, canonical ordering of
// combining marks, canonical composition. The data is Unicode 14's
// (nfc_tables.inc, from Python's unicodedata by tools/tokenizer/make_nfc.py),
// the version of the engine's PCRE2; tests/tokenizer_json_test.cc holds it to
// unicodedata.normalize on every decomposable code point and to tokenizers'
// ids on the Qwen3 fixture.
#pragma once

#include <string>
#include <string_view>

namespace waste::tokenizer {

// The NFC of valid UTF-8 (what Encode repairs first). ASCII is returned as is.
std::string Nfc(std::string_view valid_utf8);

}  // namespace waste::tokenizer
