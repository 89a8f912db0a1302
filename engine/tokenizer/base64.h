// Standard base64 (RFC 4648, section 4: A-Z a-z 0-9 + /, '=' padding), the
// spelling of token bytes in tokenizer.model. The writers of that file
// (`waste convert`, `waste synth`) encode; Tokenizer::Load decodes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace waste::tokenizer {

// The canonical base64 of `bytes`: groups of four characters, the last one
// padded with '=' to whole groups and its unused bits zero. Empty in, empty
// out. Base64Decode(Base64Encode(b)) == b for every non-empty b.
std::string Base64Encode(std::string_view bytes);

// The bytes `text` spells, or nullopt unless `text` is the canonical
// spelling Base64Encode would give: non-empty, a multiple of four
// characters, only the alphabet's characters, '=' only as one or two
// final padding characters, and padding bits zero (Python accepts "QUK=" for
// "AB"; this refuses it). Untrusted input: never reads past `text`.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace waste::tokenizer
