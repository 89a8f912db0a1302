// Writing a WARP v0 container. Used by `waste synth` and later by the
// converter. The manifest is written last, by rename, so a directory whose
// writing was interrupted never looks like a finished container.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/format/container.h"

namespace waste {

// Encodes one expert into `rec` (record_bytes long, zeroed by the caller):
// indices[m] holds matrix m's stage-major indices [stage][row * (cols/8) + v],
// scales[m] its f16 row scales. Then call FinalizeRecord.
void EncodeRecordPayload(const RecordLayout& lay, const ExpertQuant& q,
                         const std::array<std::span<const uint8_t>, 3>& indices,
                         const std::array<std::span<const uint16_t>, 3>& scales,
                         std::span<uint8_t> rec);

// Writes the header of a record whose payload is already in place, crc32 included.
void FinalizeRecord(const RecordLayout& lay, const ExpertQuant& q, int layer, int expert,
                    int codebook_id, std::span<uint8_t> rec);

class ContainerWriter {
 public:
  // Starts a container in `dir` (created if missing) for `config` (a Hugging
  // Face style config object) with experts in `expert_fmt`. A directory that
  // already holds a manifest is refused unless `overwrite`; then its manifest
  // is removed first. Encoding runs on `jobs` threads.
  static Result<std::unique_ptr<ContainerWriter>> Create(const std::string& dir,
                                                         const nlohmann::json& config,
                                                         format::Fmt expert_fmt, bool overwrite,
                                                         int jobs = 1);
  ~ContainerWriter();

  const ModelConfig& config() const { return m_.config; }
  const ExpertQuant& quant() const { return m_.quant; }
  const RecordLayout& record_layout() const { return m_.record; }

  // Appends a trunk tensor, encoding `values` (row-major, all elements) as
  // `fmt`: F32, F16 (bf16 when `bf16`), Q8G, Q4G or Q3G with `group`. `name`
  // is without the tensor prefix (TrunkSpec's); the writer adds the
  // config's (DefaultTensorPrefix: "language_model." for K3's).
  Status AddTensor(const std::string& name, const std::vector<int64_t>& shape,
                   std::span<const float> values, format::Fmt fmt, bool bf16 = false,
                   int group = 128);

  // The same, with the values produced a few rows at a time by
  // `fill(first_row, rows, out)` (rows * shape.back() floats), so a tensor
  // of gigabytes never has to sit in memory whole. `fill` is called on
  // several threads at once, for disjoint rows, in no particular order.
  using FillRows = std::function<void(int64_t first_row, int64_t rows, float* out)>;
  Status AddTensorRows(const std::string& name, const std::vector<int64_t>& shape,
                       const FillRows& fill, format::Fmt fmt, bool bf16 = false, int group = 128);

  // Appends MoE layer `layer`'s 3 * stages codebooks (gate stages, up stages,
  // down stages), each entries * vec_dim values, and records its base.
  // BF16R has none: call it with an empty span before the layer's bank.
  Status AddCodebooks(int layer, std::span<const float> books);

  // Writes layer `layer`'s bank. `fill(expert, rec)` writes the payload of
  // one record (indices and scales, e.g. with EncodeRecordPayload) into a
  // zeroed buffer; the writer adds the header and crc. `fill` runs on
  // several threads at once and must depend on its arguments only.
  using FillRecord = std::function<void(int expert, std::span<uint8_t> rec)>;
  Status WriteBank(int layer, const FillRecord& fill);

  // Writes an auxiliary file (tokenizer.model, specials.json, chat.json).
  Status WriteFile(const std::string& name, std::string_view bytes);

  // Checks that every MoE layer has its codebooks and bank, then publishes
  // the manifest.
  Status Finish();

  uint64_t bytes_written() const { return bytes_written_; }

  // Where the writing stands, for resuming after an interruption: the
  // config, the expert format, every trunk tensor and codebook written and
  // every bank finished. Taken between steps (after AddTensor*, AddCodebooks
  // or WriteBank returned), never during one.
  nlohmann::json State() const;
  // Reopens `dir` at `state` (what State() returned): trunk.bin and
  // codebooks.bin are cut back to what the state covers and appended to;
  // banks the state lists must still have their size and are kept. Nothing
  // that the state does not list survives, so a step that was interrupted
  // is simply done again. The state is untrusted (it is a file on disk).
  static Result<std::unique_ptr<ContainerWriter>> Resume(const std::string& dir,
                                                         const nlohmann::json& state, int jobs = 1);
  bool HasBank(int layer) const { return m_.Bank(layer) != nullptr; }
  int tensors_written() const { return static_cast<int>(m_.trunk.size()); }

 private:
  ContainerWriter() = default;

  // Runs body(begin, end) over [0, n) split across the writer's threads.
  void Parallel(int64_t n, const std::function<void(int64_t, int64_t)>& body) const;

  std::string dir_;
  int jobs_ = 1;
  Manifest m_;
  int trunk_fd_ = -1;
  uint64_t trunk_size_ = 0;
  int cb_fd_ = -1;
  int n_codebooks_ = 0;
  std::vector<int> codebook_base_;  // by layer, -1 until written
  uint64_t bytes_written_ = 0;
};

}  // namespace waste
