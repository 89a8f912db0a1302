#include "engine/format/writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <thread>

#include "engine/format/encoding.h"

namespace waste {
namespace {

using format::Fmt;

Status WriteAll(int fd, const void* src, size_t n, const std::string& name) {
  const auto* p = static_cast<const uint8_t*>(src);
  while (n > 0) {
    const ssize_t put = write(fd, p, n);
    if (put < 0) {
      if (errno == EINTR) continue;
      return Status::Error(name + ": write: " + std::strerror(errno));
    }
    p += put;
    n -= static_cast<size_t>(put);
  }
  return Status::Ok();
}

int OpenForWrite(const std::string& path) {
  return open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

// WARP reads the MoE settings under Kimi's names only, so a DeepSeek config
// gets them added (never replacing a key that is there): the container then
// opens in both engines.
nlohmann::json WithKimiMoeKeys(nlohmann::json config) {
  if (!config.is_object()) return config;
  const std::pair<const char*, const char*> aliases[] = {
      {"num_experts", "n_routed_experts"},
      {"num_experts_per_token", "num_experts_per_tok"},
      {"num_shared_experts", "n_shared_experts"},
  };
  for (const auto& [kimi, deepseek] : aliases)
    if (!config.contains(kimi) && config.contains(deepseek)) config[kimi] = config[deepseek];
  // WARP takes the mere presence of moe_renormalize as "on".
  if (!config.contains("moe_renormalize") && config.value("norm_topk_prob", false))
    config["moe_renormalize"] = true;
  return config;
}

// The manifest's descriptive arch: the model_type, but WARP's "kimi-k3" for
// K3, whose text config says kimi_linear.
std::string ManifestArch(const ModelConfig& c) {
  return c.arch == Arch::kKimiK3 ? "kimi-k3" : c.model_type;
}

}  // namespace

void EncodeRecordPayload(const RecordLayout& lay, const ExpertQuant& q,
                         const std::array<std::span<const uint8_t>, 3>& indices,
                         const std::array<std::span<const uint16_t>, 3>& scales,
                         std::span<uint8_t> rec) {
  const int bpv = q.bytes_per_vector();
  for (int m = 0; m < format::kMatrices; ++m) {
    const int64_t rows = lay.rows[m], nvec = lay.cols[m] / q.vec_dim;
    const int64_t per_stage = rows * nvec;
    uint8_t* dst = rec.data() + lay.matrix_off[m];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t v = 0; v < nvec; ++v) {
        // [row_block][vector][row_in_block][stage bytes], or [row][vector][stage bytes]
        const int64_t pos =
            q.index_block ? ((r / q.index_block * nvec + v) * q.index_block + r % q.index_block)
                          : r * nvec + v;
        uint8_t* out = dst + pos * bpv;
        const int64_t src = r * nvec + v;
        if (q.index_bits == 6) {
          const uint8_t s[4] = {indices[m][src], indices[m][per_stage + src],
                                indices[m][2 * per_stage + src], indices[m][3 * per_stage + src]};
          format::PackVq4(s, out);
        } else {
          for (int s = 0; s < q.stages; ++s) out[s] = indices[m][s * per_stage + src];
        }
      }
    }
  }
  uint8_t* sc = rec.data() + lay.scales_off;
  for (int m = 0; m < format::kMatrices; ++m) {
    std::memcpy(sc, scales[m].data(), static_cast<size_t>(lay.rows[m]) * 2);
    sc += lay.rows[m] * 2;
  }
}

void FinalizeRecord(const RecordLayout& lay, const ExpertQuant& q, int layer, int expert,
                    int codebook_id, std::span<uint8_t> rec) {
  format::ExpertHeader h{};
  h.magic = format::kMagicExpert;
  h.layer = static_cast<uint16_t>(layer);
  h.expert_id = static_cast<uint16_t>(expert);
  h.fmt = static_cast<uint8_t>(q.fmt);
  h.codebook_id = static_cast<uint16_t>(codebook_id);
  h.record_blocks = lay.record_bytes / format::kAlign;
  h.gate_off = lay.matrix_off[0];
  h.up_off = lay.matrix_off[1];
  h.down_off = lay.matrix_off[2];
  h.scales_off = lay.scales_off;
  h.crc32 = format::Crc32(rec.subspan(sizeof h, lay.payload_end - sizeof h));
  std::memcpy(rec.data(), &h, sizeof h);
}

Result<std::unique_ptr<ContainerWriter>> ContainerWriter::Create(const std::string& dir,
                                                                 const nlohmann::json& config,
                                                                 Fmt expert_fmt, bool overwrite,
                                                                 int jobs) {
  std::unique_ptr<ContainerWriter> w(new ContainerWriter());
  w->dir_ = dir;
  w->jobs_ = std::clamp(jobs, 1, 256);
  auto cfg = ModelConfig::FromJson(config);
  if (!cfg.ok()) return cfg.status();
  if (!format::IsExpertFmt(static_cast<int>(expert_fmt)))
    return Status::Error("expert format must be VQ3R, VQ2R, VQ4P, BF16R, MXFP4, Q4GR or INT4");
  w->m_.config = *cfg;
  w->m_.config_json = WithKimiMoeKeys(config);
  w->m_.arch = ManifestArch(*cfg);
  w->m_.tensor_prefix = DefaultTensorPrefix(config);
  w->m_.quant = ExpertQuant::For(expert_fmt);
  if (expert_fmt == Fmt::kQ4GR && cfg->n_experts > 0) {
    const int g = format::Q4grGroup(cfg->expert_width(), cfg->moe_inter);
    if (g == 0)
      return Status::Error("config: Q4GR experts need input and intermediate widths that are "
                           "multiples of 32");
    w->m_.quant.vec_dim = g;
  }
  auto lay = RecordLayout::For(*cfg, w->m_.quant);
  if (!lay.ok()) return lay.status();
  w->m_.record = *lay;
  w->codebook_base_.assign(cfg->n_layers, -1);

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error(dir + ": " + ec.message());
  const std::string manifest = dir + "/manifest.json";
  if (std::filesystem::exists(manifest)) {
    if (!overwrite)
      return Status::Error(dir +
                           " already holds a container (manifest.json); refusing to overwrite it");
    if (unlink(manifest.c_str()) != 0) return Status::Error(manifest + ": " + std::strerror(errno));
  }
  w->trunk_fd_ = OpenForWrite(dir + "/trunk.bin");
  if (w->trunk_fd_ < 0) return Status::Error(dir + "/trunk.bin: " + std::strerror(errno));
  if (cfg->n_experts > 0) {
    w->cb_fd_ = OpenForWrite(dir + "/codebooks.bin");
    if (w->cb_fd_ < 0) return Status::Error(dir + "/codebooks.bin: " + std::strerror(errno));
  }
  return w;
}

ContainerWriter::~ContainerWriter() {
  if (trunk_fd_ >= 0) close(trunk_fd_);
  if (cb_fd_ >= 0) close(cb_fd_);
}

Status ContainerWriter::AddTensor(const std::string& name, const std::vector<int64_t>& shape,
                                  std::span<const float> values, Fmt fmt, bool bf16, int group) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (shape.empty() || n != static_cast<int64_t>(values.size()))
    return Status::Error(name + ": " + std::to_string(values.size()) + " values for shape of " +
                         std::to_string(n) + " elements");
  const int64_t cols = shape.back();
  return AddTensorRows(
      name, shape,
      [&](int64_t r0, int64_t rows, float* out) {
        std::memcpy(out, values.data() + r0 * cols, static_cast<size_t>(rows * cols) * 4);
      },
      fmt, bf16, group);
}

Status ContainerWriter::AddTensorRows(const std::string& name, const std::vector<int64_t>& shape,
                                      const FillRows& fill, Fmt fmt, bool bf16, int group) {
  if (!format::IsTrunkFmt(static_cast<int>(fmt)))
    return Status::Error(name + ": not a trunk format");
  if (shape.empty()) return Status::Error(name + ": empty shape");
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const int64_t cols = shape.back(), rows = n / cols;
  TrunkTensor t;
  t.name = m_.tensor_prefix + name;
  t.fmt = fmt;
  t.bf16 = fmt == Fmt::kF16 && bf16;
  t.shape = shape;
  t.elements = n;
  t.offset = trunk_size_;
  const int bits = fmt == Fmt::kQ8G ? 8 : fmt == Fmt::kQ4G ? 4 : 3;
  const bool grouped = fmt == Fmt::kQ8G || fmt == Fmt::kQ4G || fmt == Fmt::kQ3G;
  const format::GroupedShape g{bits, group, rows, cols};
  if (grouped) t.group = group;

  // A few MB of rows at a time; the scales of grouped formats follow the payload.
  const int64_t chunk = std::max<int64_t>(1, (4 << 20) / (cols * 4));
  std::vector<float> values(static_cast<size_t>(std::min(chunk, rows) * cols));
  std::vector<uint16_t> scales(grouped ? static_cast<size_t>(rows * g.groups_per_row()) : 0);
  const int64_t row_bytes = fmt == Fmt::kF32   ? cols * 4
                            : fmt == Fmt::kF16 ? cols * 2
                                               : g.row_bytes();
  std::vector<uint8_t> payload(static_cast<size_t>(std::min(chunk, rows) * row_bytes));
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t nr = std::min(chunk, rows - r0);
    Parallel(nr, [&](int64_t a, int64_t b) {  // rows r0 + [a, b)
      float* v = values.data() + a * cols;
      fill(r0 + a, b - a, v);
      uint8_t* out = payload.data() + a * row_bytes;
      const size_t count = static_cast<size_t>((b - a) * cols);
      if (fmt == Fmt::kF32) {
        std::memcpy(out, v, count * 4);
      } else if (fmt == Fmt::kF16) {
        for (size_t i = 0; i < count; ++i) {
          const uint16_t h = t.bf16 ? format::F32ToBf16(v[i]) : format::F32ToF16(v[i]);
          std::memcpy(out + 2 * i, &h, 2);
        }
      } else {
        const format::GroupedShape part{bits, group, b - a, cols};
        format::QuantizeGrouped(part, v, out, scales.data() + (r0 + a) * g.groups_per_row());
      }
    });
    const size_t bytes = static_cast<size_t>(nr * row_bytes);
    WASTE_RETURN_IF_ERROR(WriteAll(trunk_fd_, payload.data(), bytes, "trunk.bin"));
    t.payload_bytes += bytes;
  }
  trunk_size_ += t.payload_bytes;
  if (grouped) {
    t.scale_offset = trunk_size_;
    t.scale_bytes = scales.size() * 2;
    WASTE_RETURN_IF_ERROR(WriteAll(trunk_fd_, scales.data(), t.scale_bytes, "trunk.bin"));
    trunk_size_ += t.scale_bytes;
  }
  bytes_written_ += t.stored_bytes();
  m_.trunk.push_back(std::move(t));
  return Status::Ok();
}

Status ContainerWriter::AddCodebooks(int layer, std::span<const float> books) {
  const ExpertQuant& q = m_.quant;
  const size_t per = static_cast<size_t>(q.entries) * q.vec_dim;
  if (layer < 0 || layer >= m_.config.n_layers || !m_.config.is_moe_layer(layer))
    return Status::Error("codebooks for layer " + std::to_string(layer) +
                         ", which is not a MoE layer");
  if (books.size() != per * 3 * q.stages)
    return Status::Error("codebooks for layer " + std::to_string(layer) + ": wrong size");
  codebook_base_[layer] = n_codebooks_;
  std::vector<uint8_t> buf;
  for (int b = 0; b < 3 * q.stages; ++b) {
    format::CodebookHeader h{};
    h.magic = format::kMagicCodebook;
    h.codebook_id = static_cast<uint16_t>(n_codebooks_ + b);
    h.fmt = static_cast<uint8_t>(q.fmt);
    h.vec_dim = static_cast<uint8_t>(q.vec_dim);
    h.entries = static_cast<uint32_t>(q.entries);
    const auto* hp = reinterpret_cast<const uint8_t*>(&h);
    buf.insert(buf.end(), hp, hp + sizeof h);
    for (size_t i = 0; i < per; ++i) {
      const uint16_t v = format::F32ToF16(books[b * per + i]);
      buf.push_back(static_cast<uint8_t>(v));
      buf.push_back(static_cast<uint8_t>(v >> 8));
    }
  }
  n_codebooks_ += 3 * q.stages;
  bytes_written_ += buf.size();
  return WriteAll(cb_fd_, buf.data(), buf.size(), "codebooks.bin");
}

// A page-aligned buffer, as O_DIRECT writes need.
struct AlignedBuffer {
  explicit AlignedBuffer(size_t n)
      : size(n), data(static_cast<uint8_t*>(std::aligned_alloc(format::kAlign, n))) {}
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  size_t size;
  uint8_t* data;
};

void ContainerWriter::Parallel(int64_t n, const std::function<void(int64_t, int64_t)>& body) const {
  const int64_t threads = std::min<int64_t>(jobs_, n);
  if (threads <= 1) {
    if (n > 0) body(0, n);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t j = 0; j < threads; ++j)
    pool.emplace_back([&, j] { body(n * j / threads, n * (j + 1) / threads); });
  for (auto& th : pool) th.join();
}

Status ContainerWriter::WriteBank(int layer, const FillRecord& fill) {
  if (layer < 0 || layer >= m_.config.n_layers || codebook_base_[layer] < 0)
    return Status::Error("bank for layer " + std::to_string(layer) + " before its codebooks");
  const int experts = m_.config.n_experts;
  const size_t rec = m_.record.record_bytes;
  const std::string name = "experts-L" + std::to_string(layer) + ".bin";
  const std::string path = dir_ + "/" + name;
  // Records are whole pages, so the bank can bypass the page cache: on this
  // kind of machine buffered writeback runs at a fraction of the disk's
  // speed (docs/log/2026-11-30-issues-3-to-5.md, "write speed of waste synth"). tmpfs and some
  // filesystems refuse O_DIRECT.
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) fd = OpenForWrite(path);
  if (fd < 0) return Status::Error(name + ": " + std::strerror(errno));

  // Fill chunk k on `jobs` threads while chunk k-1 is being written.
  const int per_chunk = static_cast<int>(std::max<size_t>(1, (64u << 20) / rec));
  AlignedBuffer front(rec * static_cast<size_t>(std::min(per_chunk, experts)));
  AlignedBuffer back(front.size);
  if (!front.data || !back.data) {
    close(fd);
    return Status::Error(name + ": out of memory for write buffers");
  }
  AlignedBuffer* buf[2] = {&front, &back};
  std::future<Status> pending;
  Status st;
  int which = 0;
  for (int first = 0; first < experts && st.ok(); first += per_chunk, which ^= 1) {
    const int count = std::min(per_chunk, experts - first);
    uint8_t* data = buf[which]->data;
    const size_t bytes = rec * static_cast<size_t>(count);
    std::memset(data, 0, bytes);
    Parallel(count, [&](int64_t a, int64_t b) {
      for (int64_t e = a; e < b; ++e) {
        std::span<uint8_t> r(data + rec * static_cast<size_t>(e), rec);
        fill(first + static_cast<int>(e), r);
        FinalizeRecord(m_.record, m_.quant, layer, first + static_cast<int>(e),
                       codebook_base_[layer], r);
      }
    });
    if (pending.valid()) st = pending.get();
    pending = std::async(std::launch::async,
                         [fd, data, bytes, &name] { return WriteAll(fd, data, bytes, name); });
  }
  if (pending.valid()) {
    const Status last = pending.get();
    if (st.ok()) st = last;
  }
  if (st.ok() && fdatasync(fd) != 0)
    st = Status::Error(name + ": fdatasync: " + std::strerror(errno));
  if (close(fd) != 0 && st.ok()) st = Status::Error(name + ": close: " + std::strerror(errno));
  if (!st.ok()) return st;
  ExpertBank bank;
  bank.layer = layer;
  bank.file = name;
  bank.experts = experts;
  bank.codebook_base = codebook_base_[layer];
  bank.bytes = rec * static_cast<uint64_t>(experts);
  bytes_written_ += bank.bytes;
  std::erase_if(m_.banks, [&](const ExpertBank& x) { return x.layer == layer; });
  m_.banks.push_back(bank);
  return Status::Ok();
}

nlohmann::json ContainerWriter::State() const {
  nlohmann::json trunk = nlohmann::json::array();
  for (const TrunkTensor& t : m_.trunk)
    trunk.push_back({{"name", t.name},
                     {"fmt", static_cast<int>(t.fmt)},
                     {"bf16", t.bf16},
                     {"shape", t.shape},
                     {"group", t.group},
                     {"offset", t.offset},
                     {"payload_bytes", t.payload_bytes},
                     {"scale_offset", t.scale_offset},
                     {"scale_bytes", t.scale_bytes}});
  nlohmann::json banks = nlohmann::json::array();
  for (const ExpertBank& b : m_.banks)
    banks.push_back({{"layer", b.layer}, {"codebook_base", b.codebook_base}, {"bytes", b.bytes}});
  return {{"config", m_.config_json},
          {"expert_fmt", static_cast<int>(m_.quant.fmt)},
          {"trunk", trunk},
          {"trunk_bytes", trunk_size_},
          {"codebooks", n_codebooks_},
          {"codebook_base", codebook_base_},
          {"banks", banks}};
}

Result<std::unique_ptr<ContainerWriter>> ContainerWriter::Resume(const std::string& dir,
                                                                 const nlohmann::json& state,
                                                                 int jobs) {
  std::unique_ptr<ContainerWriter> w(new ContainerWriter());
  w->dir_ = dir;
  w->jobs_ = std::clamp(jobs, 1, 256);
  // The field being read (a dotted path), so that a throw's message names it.
  std::string field;
  const auto at = [&field](const nlohmann::json& o,
                           const std::string& path) -> const nlohmann::json& {
    field = path;
    return o.at(path.substr(path.rfind('.') + 1));
  };
  try {
    const int fmt = at(state, "expert_fmt").get<int>();
    if (!format::IsExpertFmt(fmt)) return Status::Error("resume state: bad expert format");
    auto cfg = ModelConfig::FromJson(at(state, "config"));
    if (!cfg.ok()) return cfg.status().Prefixed("resume state");
    w->m_.config = *cfg;
    w->m_.config_json = at(state, "config");
    w->m_.arch = ManifestArch(*cfg);
    w->m_.tensor_prefix = DefaultTensorPrefix(w->m_.config_json);
    w->m_.quant = ExpertQuant::For(static_cast<Fmt>(fmt));
    auto lay = RecordLayout::For(*cfg, w->m_.quant);
    if (!lay.ok()) return lay.status();
    w->m_.record = *lay;
    w->trunk_size_ = at(state, "trunk_bytes").get<uint64_t>();
    for (const auto& e : at(state, "trunk")) {
      TrunkTensor t;
      t.name = at(e, "trunk.name").get<std::string>();
      t.fmt = static_cast<Fmt>(at(e, "trunk.fmt").get<int>());
      t.bf16 = at(e, "trunk.bf16").get<bool>();
      t.shape = at(e, "trunk.shape").get<std::vector<int64_t>>();
      t.elements = 1;
      for (int64_t d : t.shape) t.elements *= d;
      t.group = at(e, "trunk.group").get<int>();
      t.offset = at(e, "trunk.offset").get<uint64_t>();
      t.payload_bytes = at(e, "trunk.payload_bytes").get<uint64_t>();
      t.scale_offset = at(e, "trunk.scale_offset").get<uint64_t>();
      t.scale_bytes = at(e, "trunk.scale_bytes").get<uint64_t>();
      if (t.offset + t.payload_bytes > w->trunk_size_ ||
          (t.scale_bytes && t.scale_offset + t.scale_bytes > w->trunk_size_))
        return Status::Error("resume state: trunk tensor " + t.name + " lies past trunk_bytes");
      w->bytes_written_ += t.stored_bytes();
      w->m_.trunk.push_back(std::move(t));
    }
    w->n_codebooks_ = at(state, "codebooks").get<int>();
    w->codebook_base_ = at(state, "codebook_base").get<std::vector<int>>();
    if (static_cast<int>(w->codebook_base_.size()) != cfg->n_layers || w->n_codebooks_ < 0)
      return Status::Error("resume state: codebook bases do not fit the config");
    const ExpertQuant& q = w->m_.quant;
    for (const auto& e : at(state, "banks")) {
      ExpertBank b;
      b.layer = at(e, "banks.layer").get<int>();
      b.codebook_base = at(e, "banks.codebook_base").get<int>();
      b.bytes = at(e, "banks.bytes").get<uint64_t>();
      b.experts = cfg->n_experts;
      b.file = "experts-L" + std::to_string(b.layer) + ".bin";
      if (b.layer < 0 || b.layer >= cfg->n_layers || !cfg->is_moe_layer(b.layer) ||
          b.bytes != uint64_t{lay->record_bytes} * static_cast<uint64_t>(b.experts) ||
          b.codebook_base != w->codebook_base_[b.layer])
        return Status::Error("resume state: bank " + b.file + " does not fit the config");
      struct stat st;
      if (stat((dir + "/" + b.file).c_str(), &st) != 0 || static_cast<uint64_t>(st.st_size) != b.bytes)
        return Status::Error(b.file + ": not the " + std::to_string(b.bytes) +
                             " bytes the resume state says were written");
      w->bytes_written_ += b.bytes;
      w->m_.banks.push_back(b);
    }
    // Codebooks of layers without a finished bank are written again.
    const int per_layer = 3 * q.stages;
    int keep = 0;
    for (const ExpertBank& b : w->m_.banks) keep = std::max(keep, b.codebook_base + per_layer);
    for (int L = 0; L < cfg->n_layers; ++L)
      if (!w->m_.Bank(L) && w->codebook_base_[L] >= keep) w->codebook_base_[L] = -1;
    w->n_codebooks_ = keep;
  } catch (const nlohmann::json::exception& e) {
    return Status::Error("resume state: " + field + ": " + e.what());
  }
  // Reopen the two growing files at the lengths the state covers.
  const ExpertQuant& q = w->m_.quant;
  const uint64_t one_codebook = sizeof(format::CodebookHeader) + uint64_t{2} * q.entries * q.vec_dim;
  const std::pair<int*, std::pair<const char*, uint64_t>> files[] = {
      {&w->trunk_fd_, {"trunk.bin", w->trunk_size_}},
      {&w->cb_fd_, {"codebooks.bin", one_codebook * static_cast<uint64_t>(w->n_codebooks_)}},
  };
  for (const auto& [fd, file] : files) {
    if (fd == &w->cb_fd_ && w->m_.config.n_experts == 0) continue;
    const std::string path = dir + "/" + file.first;
    *fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0) return Status::Error(path + ": " + std::strerror(errno));
    struct stat st;
    if (fstat(*fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < file.second)
      return Status::Error(std::string(file.first) + ": shorter than the resume state says (" +
                           std::to_string(file.second) + " bytes)");
    if (ftruncate(*fd, static_cast<off_t>(file.second)) != 0 ||
        lseek(*fd, 0, SEEK_END) != static_cast<off_t>(file.second))
      return Status::Error(std::string(file.first) + ": " + std::strerror(errno));
  }
  w->bytes_written_ += one_codebook * static_cast<uint64_t>(w->n_codebooks_);
  return w;
}

Status ContainerWriter::WriteFile(const std::string& name, std::string_view bytes) {
  if (name.find('/') != std::string::npos || name == "manifest.json")
    return Status::Error(name + ": not an auxiliary file name");
  const int fd = OpenForWrite(dir_ + "/" + name);
  if (fd < 0) return Status::Error(name + ": " + std::strerror(errno));
  Status st = WriteAll(fd, bytes.data(), bytes.size(), name);
  close(fd);
  bytes_written_ += bytes.size();
  return st;
}

Status ContainerWriter::Finish() {
  for (int L = 0; L < m_.config.n_layers; ++L) {
    if (m_.config.is_moe_layer(L) && !m_.Bank(L))
      return Status::Error("layer " + std::to_string(L) + " has no expert bank yet");
  }
  std::sort(m_.banks.begin(), m_.banks.end(),
            [](const ExpertBank& a, const ExpertBank& b) { return a.layer < b.layer; });
  for (int fd : {trunk_fd_, cb_fd_}) {
    if (fd >= 0 && fsync(fd) != 0)
      return Status::Error(std::string("fsync: ") + std::strerror(errno));
  }
  const std::string text = m_.ToJson().dump(1);
  // Check our own output with the reader's rules before publishing it.
  auto check = Manifest::Parse(text);
  if (!check.ok()) return check.status().Prefixed("writer produced a manifest the reader refuses");
  const std::string tmp = dir_ + "/manifest.json.tmp";
  const int fd = OpenForWrite(tmp);
  if (fd < 0) return Status::Error(tmp + ": " + std::strerror(errno));
  Status st = WriteAll(fd, text.data(), text.size(), "manifest.json");
  if (st.ok() && fsync(fd) != 0)
    st = Status::Error(std::string("manifest.json: fsync: ") + std::strerror(errno));
  close(fd);
  if (!st.ok()) return st;
  if (rename(tmp.c_str(), (dir_ + "/manifest.json").c_str()) != 0)
    return Status::Error(std::string("manifest.json: rename: ") + std::strerror(errno));
  bytes_written_ += text.size();
  return Status::Ok();
}

}  // namespace waste
