// Reading a WARP v0 container directory:
//
//   manifest.json      config, expert_quant, layers (banks), trunk (tensor index)
//   trunk.bin          the dense trunk's tensors
//   codebooks.bin      VQ codebooks: 3 * stages per MoE layer
//   experts-L{n}.bin   one bank per MoE layer: 4 KiB-aligned records, by expert id
//   tokenizer.model, specials.json, chat.json   (optional)
//   merges.txt, pretokenizer.json               (optional; the tokenizer's)
//
// Every byte is untrusted. Container::Open checks the manifest and every file
// it names before returning: dimensions are bounded, every offset and size is
// checked against the file that holds it, banks and codebooks have exactly the
// sizes the manifest implies. Errors name the file and the field. Records are
// checked one at a time as they are read (CheckRecord), because a bank is too
// big to scan at open.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/format/chat.h"
#include "engine/format/layout.h"
#include "engine/format/model_config.h"

namespace waste {

// How the routed experts are quantized (manifest "expert_quant").
struct ExpertQuant {
  format::Fmt fmt = format::Fmt::kVQ3R;
  int stages = 3;        // residual VQ stages
  int vec_dim = 8;       // weights per VQ vector
  int entries = 256;     // codebook entries per stage
  int index_block = 64;  // rows per index block (0: plain row-major)
  // 8: one byte per stage index; 6: VQ4P packing; 16: BF16R; 4: MXFP4, Q4GR, INT4
  int index_bits = 8;

  // BF16R, MXFP4 and INT4: the checkpoint's weights kept exactly.
  bool lossless() const {
    return fmt == format::Fmt::kBF16R || fmt == format::Fmt::kMXFP4 || fmt == format::Fmt::kINT4;
  }
  // BF16R, MXFP4, INT4 and Q4GR: the weights themselves, applied by direct
  // products; no codebooks (stages 0), no lookup tables.
  bool direct() const { return lossless() || fmt == format::Fmt::kQ4GR; }
  // Payload bytes per (row, vector position): BF16R the vector's 8 bf16
  // weights; MXFP4, INT4 (vec_dim 32) and Q4GR (vec_dim 128), one scale's block,
  // its code bytes, the scale counted apart.
  int bytes_per_vector() const {
    return index_bits == 16 ? 2 * vec_dim : index_bits == 4 ? vec_dim / 2
                                          : index_bits == 6 ? 3 : stages;
  }
  // Bytes of one block's scale: 1 (MXFP4's E8M0), 2 (Q4GR's f16, INT4's bf16), 0 otherwise.
  int scale_bytes_per_vector() const {
    return fmt == format::Fmt::kMXFP4                                    ? 1
           : fmt == format::Fmt::kQ4GR || fmt == format::Fmt::kINT4 ? 2
                                                                         : 0;
  }
  double bits_per_weight() const {
    return 8.0 * (bytes_per_vector() + scale_bytes_per_vector()) / vec_dim;
  }
  // The standard settings of VQ3R, VQ2R, VQ4P, BF16R, MXFP4, Q4GR, INT4.
  static ExpertQuant For(format::Fmt fmt);
};

// Where each part of an expert record sits; derived from the config and the
// quantization, never read from the record itself.
struct RecordLayout {
  int64_t rows[format::kMatrices] = {};  // output rows of gate, up, down
  int64_t cols[format::kMatrices] = {};  // input width of gate, up, down
  uint32_t matrix_off[format::kMatrices] = {};
  uint32_t scales_off = 0;    // f16 row scales (VQ), E8M0 (MXFP4), f16 (Q4GR) or bf16 (INT4) block scales
  uint32_t bias_off = 0;      // float32 biases of gate, up, down rows; 0: none
  uint32_t payload_end = 0;   // end of the scales or biases: what the crc32 covers
  uint32_t record_bytes = 0;  // payload_end rounded up to 4 KiB

  int64_t index_bytes(int m, const ExpertQuant& q) const;
  static Result<RecordLayout> For(const ModelConfig& c, const ExpertQuant& q);
};

struct TrunkTensor {
  std::string name;  // as in the manifest, prefix included
  format::Fmt fmt = format::Fmt::kF32;
  bool bf16 = false;  // F16 entries only
  std::vector<int64_t> shape;
  int64_t elements = 0;
  int group = 0;        // grouped formats
  uint64_t offset = 0;  // of the payload in trunk.bin
  uint64_t payload_bytes = 0;
  uint64_t scale_offset = 0;  // grouped formats: of the f16 scales
  uint64_t scale_bytes = 0;

  uint64_t stored_bytes() const { return payload_bytes + scale_bytes; }
};

struct ExpertBank {
  int layer = 0;
  std::string file;  // experts-L{layer}.bin
  int experts = 0;
  int codebook_base = 0;  // first of its 3 * stages codebooks
  uint64_t bytes = 0;     // experts * record_bytes
};

struct SpecialToken {
  int id;
  std::string text;
};

struct Manifest {
  nlohmann::json config_json;  // verbatim, for tools that need a key we do not model
  ModelConfig config;
  std::string arch;
  std::string tensor_prefix;
  ExpertQuant quant;
  RecordLayout record;
  std::vector<TrunkTensor> trunk;
  std::vector<ExpertBank> banks;  // ascending layer

  // Parses and checks everything that can be checked without the other files.
  static Result<Manifest> Parse(std::string_view text);
  nlohmann::json ToJson() const;
  const TrunkTensor* FindTensor(std::string_view name_without_prefix) const;
  const ExpertBank* Bank(int layer) const;
};

inline constexpr uint64_t kMaxManifestBytes = 64ull << 20;

class Container {
 public:
  // Opens and validates the container in `dir`.
  static Result<Container> Open(const std::string& dir);

  Container(Container&&) noexcept;
  Container& operator=(Container&&) noexcept;
  ~Container();

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  const ModelConfig& config() const { return manifest_.config; }
  const RecordLayout& record_layout() const { return manifest_.record; }
  uint32_t record_bytes() const { return manifest_.record.record_bytes; }

  // Codebook `id`: entries * vec_dim floats, entry-major.
  std::span<const float> Codebook(int id) const;
  int codebook_count() const { return n_codebooks_; }

  // The file descriptors of trunk.bin and a layer's bank (owned here).
  int trunk_fd() const { return trunk_fd_; }
  int bank_fd(int layer) const;

  // Reads one record with pread into `dst` (record_bytes() long) and checks
  // its header, and its crc32 when `verify_crc`.
  Status ReadRecord(int layer, int expert, uint8_t* dst, bool verify_crc) const;
  // Checks a record already in memory as the record (layer, expert).
  Status CheckRecord(int layer, int expert, std::span<const uint8_t> rec, bool verify_crc) const;

  // Reads one trunk tensor's stored bytes (payload, then scales).
  Status ReadTensor(const TrunkTensor& t, std::vector<uint8_t>* payload,
                    std::vector<uint8_t>* scales) const;
  // The same, straight into caller memory (no copy through vectors, for a
  // trunk packed into a large buffer): `payload` must be exactly
  // t.payload_bytes long and `scales` exactly t.scale_bytes.
  Status ReadTensorInto(const TrunkTensor& t, std::span<uint8_t> payload,
                        std::span<uint8_t> scales) const;

  // Optional files; empty when the container has none.
  bool has_tokenizer() const { return has_tokenizer_; }
  const std::vector<SpecialToken>& specials() const { return specials_; }
  // chat.json (engine/format/chat.h); none when the container has none.
  const std::optional<ChatFormat>& chat() const { return chat_; }

  uint64_t total_bytes() const { return total_bytes_; }  // every file the manifest names

 private:
  Container() = default;
  void Close();
  Status OpenFiles();

  std::string dir_;
  Manifest manifest_;
  int trunk_fd_ = -1;
  std::vector<int> bank_fds_;  // by layer, -1 for dense layers
  std::vector<float> codebooks_;
  int n_codebooks_ = 0;
  bool has_tokenizer_ = false;
  std::vector<SpecialToken> specials_;
  std::optional<ChatFormat> chat_;
  uint64_t total_bytes_ = 0;
};

// Reads a whole small file (at most max_bytes) for parsing.
Result<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes);
// Parses untrusted JSON: bounded nesting, errors carry `what` and the position.
Result<nlohmann::json> ParseJson(std::string_view text, const std::string& what);

// Optional fields of an untrusted JSON object, read without a throw. Absent
// or null (or `obj` not an object): *out keeps its value. Present but of
// another type, or outside [lo, hi]: an error of `where` + key, where `where`
// names the file and the object and ends in its separator: "uses.json: "
// gives "uses.json: fingerprint is not a string", "synth config: config."
// gives "synth config: config.vocab_size is not an integer".
Status JsonString(const nlohmann::json& obj, const std::string& where, const char* key,
                  std::string* out);
Status JsonInt(const nlohmann::json& obj, const std::string& where, const char* key, int64_t lo,
               int64_t hi, int64_t* out);
Status JsonNumber(const nlohmann::json& obj, const std::string& where, const char* key, double lo,
                  double hi, double* out);
Status JsonBool(const nlohmann::json& obj, const std::string& where, const char* key, bool* out);

}  // namespace waste
