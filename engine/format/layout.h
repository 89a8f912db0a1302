// The WARP v0 container's on-disk layout: magic numbers, format codes and the
// two binary headers. Layout only, no I/O. docs/FORMAT.md says which parts of
// the format this project supports and what it adds.
//
// All multi-byte fields are little-endian (this project builds for x86-64 and
// checks that at compile time); structs are packed by construction and their
// sizes are asserted.
#pragma once

#include <bit>
#include <cstdint>
#include <string_view>

namespace waste::format {

static_assert(std::endian::native == std::endian::little, "the format is little-endian");

inline constexpr int kFormatVersion = 0;
inline constexpr uint32_t kAlign = 4096;  // every expert record is 4 KiB aligned and sized

inline constexpr uint32_t kMagicExpert = 0x50584557u;    // "WEXP"
inline constexpr uint32_t kMagicCodebook = 0x4b424357u;  // "WCBK"

// The `fmt` codes of trunk tensors, expert records and codebooks.
enum class Fmt : uint8_t {
  kF32 = 0,   // norms, routers, correction bias
  kF16 = 1,   // half floats; bf16 when the trunk entry says "dtype": "bf16" (our extension)
  kQ8G = 2,   // int8, one f16 scale per group (128) of a row
  kQ4G = 3,   // two int4 per byte (low nibble first, +8 bias), f16 scale per group
  kVQ3R = 4,  // experts: 3 residual stages of 8-dim VQ, 256 entries, 1 byte per index
  kVQ2R = 5,  // experts: 2 stages of the same
  kSUB1 = 6,  // specified by WARP, never written: refused
  kQ3G = 7,   // 3-bit packed rows with a guard byte, f16 scale per group
  kVQ4P = 8,  // experts: 4 stages of 64 entries, four 6-bit indices in 3 bytes
  // Experts, this project's extension: each matrix stored whole as
  // row-major bfloat16, no row scales, no codebooks. Lossless for a
  // BF16 checkpoint, so a container can be compared exactly with its source.
  kBF16R = 9,
  // Experts, this project's extension: each matrix as the checkpoint's MXFP4
  // (E2M1 codes, one E8M0 scale per 32 values of a row), kept bit for bit;
  // no codebooks. docs/FORMAT.md has the record's layout.
  kMXFP4 = 10,
  // Experts, this project's extension: each matrix as the trunk's Q4G in
  // groups of 128 (two int4 a byte, one f16 scale a group of a row),
  // applied with the trunk's products; no codebooks, no lookup tables.
  kQ4GR = 11,
  // Experts, this project's extension: each matrix as compressed-tensors'
  // pack-quantized INT4 (symmetric, one bf16 scale per 32 values of a row),
  // kept bit for bit; no codebooks. Kimi K2.5's and K2-Thinking's experts.
  kINT4 = 12,
};

std::string_view FmtName(Fmt f);
bool IsTrunkFmt(int fmt);   // F32, F16, Q8G, Q4G, Q3G
bool IsExpertFmt(int fmt);  // VQ3R, VQ2R, VQ4P, BF16R, MXFP4, Q4GR, INT4

// Record flag bits (WARP's WF_*).
inline constexpr uint8_t kFlagBf16 = 1u << 0;     // f16 payloads are bf16: not implemented, refused
inline constexpr uint8_t kFlagHasSub = 1u << 1;   // a substitute record exists (never written)
inline constexpr uint8_t kFlagHotHint = 1u << 2;  // the converter marked it hot

// Header of one expert record in experts-L{n}.bin. The record is
//   header | gate indices | up indices | down indices | f16 row scales | zero pad to 4 KiB
// (BF16R: header | gate | up | down, each [rows][cols] bfloat16 | zero pad; no scales;
//  MXFP4: header | gate | up | down codes | E8M0 scales of gate, up, down | zero pad;
//  Q4GR: header | gate | up | down Q4G payloads | f16 group scales of gate, up, down | zero pad;
//  INT4: header | gate | up | down codes | bf16 group scales of gate, up, down | zero pad)
// then, when the config gives the experts biases, float32 biases of gate, up
// and down after the scales; crc32 (zlib's) covers the bytes from the end of
// the header to the end of the biases (or scales).
struct ExpertHeader {
  uint32_t magic;      // kMagicExpert
  uint16_t layer;      // must be the bank's layer
  uint16_t expert_id;  // must be the record's position in the bank
  uint8_t fmt;         // VQ3R / VQ2R (8-bit indices) or VQ4P (packed)
  uint8_t flags;
  uint16_t codebook_id;  // first of the layer's 3 * stages codebooks
  uint16_t lowrank_id;   // must be 0 in v0
  uint16_t reserved0;
  uint32_t record_blocks;  // record size / 4096
  uint32_t gate_off;       // offsets are relative to the record start
  uint32_t up_off;
  uint32_t down_off;
  uint32_t scales_off;  // one f16 per output row of gate, up, down (MXFP4, Q4GR, INT4: block scales)
  uint32_t crc32;
  uint32_t reserved1[2];
};
static_assert(sizeof(ExpertHeader) == 48, "expert header is 48 bytes on disk");

// Header of one codebook in codebooks.bin, followed by entries * vec_dim f16.
struct CodebookHeader {
  uint32_t magic;        // kMagicCodebook
  uint16_t codebook_id;  // its position in the file (mod 65536)
  uint8_t fmt;           // the expert format it serves (WARP writes 4 for all)
  uint8_t vec_dim;
  uint32_t entries;
  uint32_t reserved;
};
static_assert(sizeof(CodebookHeader) == 16, "codebook header is 16 bytes on disk");

// The three matrices of an expert, in record order.
enum class Matrix : int { kGate = 0, kUp = 1, kDown = 2 };
inline constexpr int kMatrices = 3;

}  // namespace waste::format
