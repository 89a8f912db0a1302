#include "engine/convert/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "engine/convert/dequant.h"
#include "engine/format/container.h"
#include "engine/format/encoding.h"

namespace waste::convert {
namespace {

using nlohmann::json;

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t CeilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// "" when `config`'s quantization_config (top level, or a wrapper's
// text_config's) is compressed-tensors' pack-quantized INT4 as the INT4
// storage reads it: weights only, int, 4 bits, symmetric (no zero point),
// groups of 32 along a row, no activation reordering; else what is not.
std::string Int4SchemeRefusal(const json& config) {
  const json* q = nullptr;
  if (auto it = config.find("quantization_config"); it != config.end()) q = &*it;
  else if (auto t = config.find("text_config"); t != config.end() && t->is_object() &&
                                                 t->contains("quantization_config"))
    q = &(*t)["quantization_config"];
  if (!q || !q->is_object()) return "config.json has no quantization_config";
  const std::string at = "quantization_config";
  auto text = [](const json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); };
  const json method = q->value("quant_method", json());
  if (method != "compressed-tensors")
    return at + ".quant_method is " + text(method) + ", not compressed-tensors";
  const json format = q->value("format", json());
  if (format != "pack-quantized") return at + ".format is " + text(format) + ", not pack-quantized";
  const auto groups = q->find("config_groups");
  if (groups == q->end() || !groups->is_object() || groups->empty())
    return at + ".config_groups is missing or empty";
  for (const auto& [name, g] : groups->items()) {
    const std::string gat = at + ".config_groups." + name;
    if (!g.is_object() || !g.contains("weights") || !g["weights"].is_object())
      return gat + ".weights is missing";
    if (g.contains("format") && !g["format"].is_null() && g["format"] != "pack-quantized")
      return gat + ".format is " + text(g["format"]) + ", not pack-quantized";
    for (const char* act : {"input_activations", "output_activations"})
      if (g.contains(act) && !g[act].is_null())
        return gat + "." + act + " is set (waste holds weight-only INT4)";
    const json& w = g["weights"];
    const std::string wat = gat + ".weights.";
    const std::pair<const char*, json> want[] = {{"num_bits", 4},
                                                 {"type", "int"},
                                                 {"symmetric", true},
                                                 {"strategy", "group"},
                                                 {"group_size", 32}};
    for (const auto& [key, value] : want)
      if (w.value(key, json()) != value)
        return wat + key + " is " + text(w.value(key, json())) + ", waste holds " + text(value);
    for (const char* key : {"actorder", "dynamic"}) {
      const json v = w.value(key, json());
      if (!v.is_null() && v != false && v != "none")
        return wat + key + " is " + text(v) + " (waste holds none)";
    }
  }
  return "";
}

}  // namespace

std::string Weight::where() const {
  return (file ? file->name() : std::string("?")) + ": tensor " + name;
}

std::string Weight::describe() const {
  switch (storage) {
    case Storage::kPlain:
      return std::string(DTypeName(data->dtype)) + " " + ShapeText(shape);
    case Storage::kFp8Block:
      return "F8_E4M3 " + ShapeText(shape) + " with block scales";
    case Storage::kMxfp4:
      return "MXFP4 " + ShapeText(shape);
    case Storage::kInt4:
      return "INT4 " + ShapeText(shape);
  }
  return "?";
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  namespace fs = std::filesystem;
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  c->dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::Error(dir + ": not a directory");
  auto text = ReadSmallFile(dir + "/config.json", 16u << 20);
  if (!text.ok()) return text.status().Prefixed(dir);
  auto cfg = ParseJson(*text, "config.json");
  if (!cfg.ok()) return cfg.status();
  if (!cfg->is_object()) return Status::Error("config.json: not a JSON object");
  c->config_ = std::move(*cfg);
  c->int4_refusal_ = Int4SchemeRefusal(c->config_);
  if (auto q = c->config_.find("quantization_config"); q != c->config_.end() && q->is_object()) {
    if (auto b = q->find("weight_block_size"); b != q->end()) {
      if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() ||
          !(*b)[1].is_number_integer() || (*b)[0].get<int64_t>() < 1 ||
          (*b)[0].get<int64_t>() > 65536 || (*b)[1].get<int64_t>() < 1 ||
          (*b)[1].get<int64_t>() > 65536)
        return Status::Error("config.json: quantization_config.weight_block_size must be [rows, cols]");
      c->fp8_block_rows_ = (*b)[0].get<int>();
      c->fp8_block_cols_ = (*b)[1].get<int>();
    }
  }

  // The shards: the index's, each checked to hold what the index says.
  std::map<std::string, std::vector<std::string>> listed;  // shard -> tensors the index puts there
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (fs::exists(index_path, ec)) {
    auto itext = ReadSmallFile(index_path, 256u << 20);
    if (!itext.ok()) return itext.status();
    auto idx = ParseJson(*itext, "model.safetensors.index.json");
    if (!idx.ok()) return idx.status();
    const auto wm = idx->find("weight_map");
    if (wm == idx->end() || !wm->is_object())
      return Status::Error("model.safetensors.index.json: weight_map is missing");
    for (const auto& [tensor, file] : wm->items()) {
      if (!file.is_string())
        return Status::Error("model.safetensors.index.json: weight_map." + tensor +
                             " is not a file name");
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        return Status::Error("model.safetensors.index.json: weight_map." + tensor + " names \"" +
                             f + "\", not a file of the directory");
      listed[f].push_back(tensor);
    }
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (EndsWith(n, ".safetensors")) listed[n];
    }
    if (ec) return Status::Error(dir + ": " + ec.message());
  }
  if (listed.empty())
    return Status::Error(dir + ": no safetensors shards (and no model.safetensors.index.json)");
  for (const auto& [file, tensors] : listed) {
    const std::string path = dir + "/" + file;
    if (!fs::exists(path, ec))
      return Status::Error(file + ": missing shard (model.safetensors.index.json puts " +
                           std::to_string(tensors.size()) + " tensors there, e.g. " +
                           (tensors.empty() ? std::string("?") : tensors.front()) + ")");
    auto f = SafetensorsFile::Open(path, file);
    if (!f.ok()) return f.status();
    for (const std::string& t : tensors) {
      if (!(*f)->Find(t))
        return Status::Error(file + ": has no tensor " + t +
                             " (model.safetensors.index.json says it is there)");
    }
    const int at = static_cast<int>(c->files_.size());
    for (const auto& [name, entry] : (*f)->tensors()) {
      const auto [it, fresh] = c->where_.emplace(name, at);
      if (!fresh) {
        // The index decides which copy counts; without one a name must be unique.
        if (tensors.empty())
          return Status::Error(file + ": tensor " + name + " is also in " +
                               c->files_[it->second]->name());
        if (std::find(tensors.begin(), tensors.end(), name) != tensors.end()) it->second = at;
      }
    }
    c->shard_bytes_ += (*f)->size();
    c->files_.push_back(std::move(*f));
  }
  return c;
}

const TensorEntry* Checkpoint::Entry(const std::string& name, const SafetensorsFile** file) const {
  const auto it = where_.find(name);
  if (it == where_.end()) return nullptr;
  *file = files_[it->second].get();
  return (*file)->Find(name);
}

bool Checkpoint::Has(const std::string& name) const {
  const SafetensorsFile* f;
  if (Entry(name, &f)) return true;
  return (EndsWith(name, ".weight") && Entry(name + "_packed", &f)) || Entry(name + "_blocks", &f);
}

Result<Weight> Checkpoint::Find(const std::string& name) const {
  Weight w;
  w.name = name;
  const SafetensorsFile* f = nullptr;
  const TensorEntry* e = Entry(name, &f);
  auto mark = [&](std::initializer_list<std::string> names) {
    std::lock_guard<std::mutex> lock(used_mu_);
    for (const auto& n : names) used_.insert(n);
  };
  if (e) {
    w.file = f;
    w.data = e;
    w.shape = e->shape;
    if (e->dtype == DType::kF8E4M3) {
      const SafetensorsFile* sf = nullptr;
      const TensorEntry* s = Entry(name + "_scale_inv", &sf);
      if (!s)
        return Status::Error(w.where() + " is F8_E4M3 but " + name + "_scale_inv is missing");
      if (e->shape.size() != 2)
        return Status::Error(w.where() + ": F8_E4M3 with block scales must be 2-D, not " +
                             ShapeText(e->shape));
      w.storage = Storage::kFp8Block;
      w.scale = s;
      w.block_rows = fp8_block_rows_;
      w.block_cols = fp8_block_cols_;
      const std::vector<int64_t> want = {CeilDiv(e->shape[0], w.block_rows),
                                         CeilDiv(e->shape[1], w.block_cols)};
      if (s->shape != want || (s->dtype != DType::kF32 && s->dtype != DType::kBF16))
        return Status::Error(sf->name() + ": tensor " + name + "_scale_inv is " +
                             std::string(DTypeName(s->dtype)) + " " + ShapeText(s->shape) +
                             ", the block scales of " + ShapeText(e->shape) + " need F32 " +
                             ShapeText(want));
      w.scale_file = sf;
      mark({name, name + "_scale_inv"});
    } else if (e->dtype == DType::kF32 || e->dtype == DType::kF16 || e->dtype == DType::kBF16) {
      mark({name});
    } else {
      return Status::Error(w.where() + ": dtype " + std::string(DTypeName(e->dtype)) +
                           " is not a weight type waste convert reads (F32, F16, BF16, F8_E4M3 "
                           "with block scales, MXFP4, INT4)");
    }
  } else if (const TensorEntry* p =
                 EndsWith(name, ".weight") ? Entry(name + "_packed", &f) : nullptr;
             p && p->dtype == DType::kI32) {  // Kimi K2.5's experts: eight 4-bit integers an int32
    w.file = f;
    w.data = p;
    WASTE_RETURN_IF_ERROR(FindInt4(name, &w));
  } else if (EndsWith(name, ".weight") && Entry(name + "_packed", &f)) {
    const std::string packed = name + "_packed", scale = name + "_scale";
    e = Entry(packed, &f);
    w.file = f;
    w.data = e;
    w.storage = Storage::kMxfp4;
    w.block_rows = 1;
    w.block_cols = 32;
    if (e->dtype != DType::kU8 || e->shape.size() != 2)
      return Status::Error(f->name() + ": tensor " + packed + " is " +
                           std::string(DTypeName(e->dtype)) + " " + ShapeText(e->shape) +
                           ", MXFP4 codes must be U8 [rows, cols / 2]");
    w.shape = {e->shape[0], e->shape[1] * 2};
    const SafetensorsFile* sf = nullptr;
    const TensorEntry* s = Entry(scale, &sf);
    if (!s) return Status::Error(f->name() + ": tensor " + packed + " has no " + scale);
    const std::vector<int64_t> want = {w.shape[0], CeilDiv(w.shape[1], 32)};
    if (s->shape != want || (s->dtype != DType::kU8 && s->dtype != DType::kF8E8M0))
      return Status::Error(sf->name() + ": tensor " + scale + " is " +
                           std::string(DTypeName(s->dtype)) + " " + ShapeText(s->shape) +
                           ", MXFP4 scales of " + ShapeText(w.shape) + " need U8 " +
                           ShapeText(want));
    w.scale = s;
    w.scale_file = sf;
    mark({packed, scale});
  } else if (Entry(name + "_blocks", &f)) {
    // GPT-OSS's layout: NAME_blocks U8 [..., rows, cols / 32, 16] and
    // NAME_scales U8 [..., rows, cols / 32]; the same bytes, row by row, as
    // the layout above.
    const std::string blocks = name + "_blocks", scale = name + "_scales";
    e = Entry(blocks, &f);
    w.file = f;
    w.data = e;
    w.storage = Storage::kMxfp4;
    w.block_rows = 1;
    w.block_cols = 32;
    if (e->dtype != DType::kU8 || e->shape.size() < 3 || e->shape.back() != 16)
      return Status::Error(f->name() + ": tensor " + blocks + " is " +
                           std::string(DTypeName(e->dtype)) + " " + ShapeText(e->shape) +
                           ", MXFP4 blocks must be U8 [..., rows, cols / 32, 16]");
    w.shape.assign(e->shape.begin(), e->shape.end() - 2);
    w.shape.push_back(e->shape[e->shape.size() - 2] * 32);
    const SafetensorsFile* sf = nullptr;
    const TensorEntry* s = Entry(scale, &sf);
    if (!s) return Status::Error(f->name() + ": tensor " + blocks + " has no " + scale);
    const std::vector<int64_t> want(e->shape.begin(), e->shape.end() - 1);
    if (s->shape != want || (s->dtype != DType::kU8 && s->dtype != DType::kF8E8M0))
      return Status::Error(sf->name() + ": tensor " + scale + " is " +
                           std::string(DTypeName(s->dtype)) + " " + ShapeText(s->shape) +
                           ", the MXFP4 scales of " + blocks + " need U8 " + ShapeText(want));
    w.scale = s;
    w.scale_file = sf;
    mark({blocks, scale});
  } else {
    return Status::Error("the checkpoint has no tensor " + name);
  }
  w.cols = w.shape.empty() ? 1 : w.shape.back();
  w.rows = w.cols == 0 ? 0 : 1;
  for (size_t i = 0; i + 1 < w.shape.size(); ++i) w.rows *= w.shape[i];
  return w;
}

Status Checkpoint::FindInt4(const std::string& name, Weight* w) const {
  const std::string packed = name + "_packed", scale = name + "_scale", shape = name + "_shape";
  const TensorEntry* e = w->data;
  const std::string where = w->file->name() + ": tensor " + packed;
  if (!int4_refusal_.empty())
    return Status::Error(where + " is I32 " + ShapeText(e->shape) +
                         ": compressed-tensors' pack-quantized INT4, and " + int4_refusal_);
  const SafetensorsFile* f = nullptr;
  for (const char* refused : {"_zero_point", "_g_idx"})
    if (Entry(name + refused, &f))
      return Status::Error(f->name() + ": tensor " + name + refused +
                           ": an INT4 zero point or group index is not held (symmetric, "
                           "unordered groups only)");
  const TensorEntry* se = Entry(shape, &f);
  if (!se) return Status::Error(where + " has no " + shape);
  if ((se->dtype != DType::kI32 && se->dtype != DType::kI64) ||
      se->shape != std::vector<int64_t>{2})
    return Status::Error(f->name() + ": tensor " + shape + " is " +
                         std::string(DTypeName(se->dtype)) + " " + ShapeText(se->shape) +
                         ", it must be I32 or I64 [2]");
  int64_t dims[2];
  const uint8_t* sb = f->Bytes(*se).data();
  for (int i = 0; i < 2; ++i) {
    if (se->dtype == DType::kI64) {
      std::memcpy(&dims[i], sb + 8 * i, 8);
    } else {
      int32_t d;
      std::memcpy(&d, sb + 4 * i, 4);
      dims[i] = d;
    }
  }
  if (e->shape.size() != 2 || dims[0] != e->shape[0] || dims[1] <= 0 || dims[1] % 32 != 0 ||
      e->shape[1] != dims[1] / 8)
    return Status::Error(where + " is I32 " + ShapeText(e->shape) + " and " + shape + " says [" +
                         std::to_string(dims[0]) + ", " + std::to_string(dims[1]) +
                         "]: INT4 codes must be [rows, cols / 8], cols a multiple of 32");
  w->storage = Storage::kInt4;
  w->block_rows = 1;
  w->block_cols = 32;
  w->shape = {dims[0], dims[1]};
  const TensorEntry* s = Entry(scale, &w->scale_file);
  if (!s) return Status::Error(where + " has no " + scale);
  const std::vector<int64_t> want = {dims[0], dims[1] / 32};
  if (s->shape != want || s->dtype != DType::kBF16)
    return Status::Error(w->scale_file->name() + ": tensor " + scale + " is " +
                         std::string(DTypeName(s->dtype)) + " " + ShapeText(s->shape) +
                         ", INT4 scales of " + ShapeText(w->shape) + " need BF16 " +
                         ShapeText(want));
  w->scale = s;
  std::lock_guard<std::mutex> lock(used_mu_);
  for (const std::string& n : {packed, scale, shape}) used_.insert(n);
  return Status::Ok();
}

Status Checkpoint::ReadRows(const Weight& w, int64_t first, int64_t n, float* out) const {
  if (first < 0 || n < 0 || first + n > w.rows)
    return Status::Error(w.where() + ": rows [" + std::to_string(first) + ", " +
                         std::to_string(first + n) + ") of " + std::to_string(w.rows));
  const uint8_t* base = w.file->Bytes(*w.data).data();
  const int64_t cols = w.cols;
  switch (w.storage) {
    case Storage::kPlain: {
      const int size = DTypeBytes(w.data->dtype);
      const uint8_t* p = base + first * cols * size;
      const int64_t count = n * cols;
      if (w.data->dtype == DType::kF32) {
        std::memcpy(out, p, static_cast<size_t>(count) * 4);
      } else {
        const bool bf = w.data->dtype == DType::kBF16;
        for (int64_t i = 0; i < count; ++i) {
          uint16_t h;
          std::memcpy(&h, p + 2 * i, 2);
          out[i] = bf ? format::Bf16ToF32(h) : format::F16ToF32(h);
        }
      }
      break;
    }
    case Storage::kFp8Block: {
      const uint8_t* sb = w.scale_file->Bytes(*w.scale).data();
      const int64_t scale_cols = CeilDiv(cols, w.block_cols);
      const bool bf = w.scale->dtype == DType::kBF16;
      for (int64_t r = 0; r < n; ++r) {
        const int64_t row = first + r;
        const uint8_t* codes = base + row * cols;
        const int64_t srow = row / w.block_rows;
        for (int64_t c0 = 0; c0 < cols; c0 += w.block_cols) {
          const int64_t at = srow * scale_cols + c0 / w.block_cols;
          float s;
          if (bf) {
            uint16_t h;
            std::memcpy(&h, sb + 2 * at, 2);
            s = format::Bf16ToF32(h);
          } else {
            std::memcpy(&s, sb + 4 * at, 4);
          }
          const int64_t c1 = std::min<int64_t>(cols, c0 + w.block_cols);
          for (int64_t c = c0; c < c1; ++c) out[r * cols + c] = Fp8E4m3ToF32(codes[c]) * s;
        }
      }
      break;
    }
    case Storage::kMxfp4: {
      const uint8_t* sb = w.scale_file->Bytes(*w.scale).data();
      const int64_t scale_cols = CeilDiv(cols, 32);
      for (int64_t r = 0; r < n; ++r) {
        const int64_t row = first + r;
        const uint8_t* codes = base + row * (cols / 2);
        for (int64_t c = 0; c < cols; ++c) {
          const uint8_t b = codes[c / 2];
          const float v = format::E2m1ToF32((c & 1) ? static_cast<uint8_t>(b >> 4) : b);
          out[r * cols + c] = v * format::E8m0ToF32(sb[row * scale_cols + c / 32]);
        }
      }
      break;
    }
    case Storage::kInt4: {
      const uint8_t* sb = w.scale_file->Bytes(*w.scale).data();
      for (int64_t r = 0; r < n; ++r) {
        const int64_t row = first + r;
        const uint8_t* codes = base + row * (cols / 2);
        for (int64_t c = 0; c < cols; ++c) {
          const uint8_t b = codes[c / 2];
          uint16_t s;
          std::memcpy(&s, sb + 2 * (row * (cols / 32) + c / 32), 2);
          out[r * cols + c] = format::Int4ToF32((c & 1) ? static_cast<uint8_t>(b >> 4) : b) *
                              format::Bf16ToF32(s);
        }
      }
      break;
    }
  }
  for (int64_t i = 0; i < n * cols; ++i) {
    if (!std::isfinite(out[i]))
      return Status::Error(w.where() + ": row " + std::to_string(first + i / cols) +
                           " holds a value that is not finite");
  }
  return Status::Ok();
}

Status Checkpoint::ReadMxfp4Row(const Weight& w, int64_t row, uint8_t* codes,
                                uint8_t* scales) const {
  if (w.storage != Storage::kMxfp4)
    return Status::Error(w.where() + " is " + w.describe() + ", not MXFP4");
  if (row < 0 || row >= w.rows || w.cols % 32 != 0)
    return Status::Error(w.where() + ": row " + std::to_string(row) + " of " +
                         std::to_string(w.rows));
  const int64_t blocks = w.cols / 32;
  std::memcpy(codes, w.file->Bytes(*w.data).data() + row * (w.cols / 2),
              static_cast<size_t>(w.cols / 2));
  std::memcpy(scales, w.scale_file->Bytes(*w.scale).data() + row * blocks,
              static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b)
    if (scales[b] == 255)
      return Status::Error(w.where() + ": row " + std::to_string(row) +
                           " has the E8M0 scale 255 (NaN)");
  return Status::Ok();
}

void Checkpoint::Release(const Weight& w) const {
  w.file->Release(*w.data);
  if (w.scale) w.scale_file->Release(*w.scale);
}

void Checkpoint::Prefetch(const Weight& w) const {
  w.file->Prefetch(*w.data);
  if (w.scale) w.scale_file->Prefetch(*w.scale);
}

void Checkpoint::ReleaseRows(const Weight& w, int64_t first, int64_t n) const {
  if (w.rows <= 0) return;
  const uint64_t row_bytes = w.data->bytes / static_cast<uint64_t>(w.rows);
  TensorEntry part = *w.data;
  part.offset += row_bytes * static_cast<uint64_t>(first);
  part.bytes = row_bytes * static_cast<uint64_t>(n);
  w.file->Release(part);
}

std::vector<std::string> Checkpoint::Unused() const {
  std::lock_guard<std::mutex> lock(used_mu_);
  std::vector<std::string> out;
  for (const auto& [name, _] : where_)
    if (!used_.count(name)) out.push_back(name);
  return out;
}

Status Checkpoint::ReadInt4Row(const Weight& w, int64_t row, uint8_t* codes,
                               uint8_t* scales) const {
  if (w.storage != Storage::kInt4)
    return Status::Error(w.where() + " is " + w.describe() + ", not INT4");
  if (row < 0 || row >= w.rows)
    return Status::Error(w.where() + ": row " + std::to_string(row) + " of " +
                         std::to_string(w.rows));
  const int64_t groups = w.cols / 32;
  std::memcpy(codes, w.file->Bytes(*w.data).data() + row * (w.cols / 2),
              static_cast<size_t>(w.cols / 2));
  std::memcpy(scales, w.scale_file->Bytes(*w.scale).data() + 2 * row * groups,
              static_cast<size_t>(2 * groups));
  for (int64_t g = 0; g < groups; ++g) {
    uint16_t s;
    std::memcpy(&s, scales + 2 * g, 2);
    if ((s & 0x7f80) == 0x7f80)
      return Status::Error(w.where() + ": row " + std::to_string(row) +
                           " has a bf16 scale that is not finite");
  }
  return Status::Ok();
}

}  // namespace waste::convert
