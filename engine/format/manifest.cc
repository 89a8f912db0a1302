// Manifest parsing: everything about manifest.json that can be checked
// without opening the files it names.
#include <algorithm>
#include <cstdint>
#include <set>

#include "engine/format/container.h"
#include "engine/format/encoding.h"

namespace waste {
namespace {

using format::Fmt;
using nlohmann::json;

constexpr int64_t kMaxTensorDim = int64_t{1} << 26;
constexpr int64_t kMaxTensorElements = int64_t{1} << 40;
constexpr size_t kMaxTensors = 1 << 20;
constexpr int kMaxJsonDepth = 64;

std::string Field(const std::string& where, const char* key) {
  return where + "." + key;
}

// A non-negative integer field, at most `hi`.
Status GetU64(const json& o, const std::string& where, const char* key, uint64_t hi, uint64_t* out,
              std::optional<uint64_t> fallback = std::nullopt) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) {
    if (!fallback) return Status::Error(Field(where, key) + " is missing");
    *out = *fallback;
    return Status::Ok();
  }
  if (it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0)) {
    const uint64_t v = it->get<uint64_t>();
    if (v > hi)
      return Status::Error(Field(where, key) + " = " + std::to_string(v) + " is too large");
    *out = v;
    return Status::Ok();
  }
  return Status::Error(Field(where, key) + " is not a non-negative integer");
}

Status GetSmallInt(const json& o, const std::string& where, const char* key, int lo, int hi,
                   int* out, std::optional<int> fallback = std::nullopt) {
  uint64_t v;
  WASTE_RETURN_IF_ERROR(GetU64(o, where, key, static_cast<uint64_t>(hi), &v,
                               fallback ? std::optional<uint64_t>(*fallback) : std::nullopt));
  if (static_cast<int64_t>(v) < lo)
    return Status::Error(Field(where, key) + " = " + std::to_string(v) + " is below " +
                         std::to_string(lo));
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status ParseExpertQuant(const json& j, ExpertQuant* q) {
  if (!j.is_object()) return Status::Error("expert_quant is missing or not an object");
  const std::string w = "expert_quant";
  if (auto f = j.find("fmt"); f != j.end() && f->is_string() &&
                              (f->get<std::string>() == "BF16R" || f->get<std::string>() == "MXFP4" ||
                               f->get<std::string>() == "Q4GR" || f->get<std::string>() == "INT4")) {
    // This project's direct extensions: only one shape of each exists.
    const std::string name = f->get<std::string>();
    *q = ExpertQuant::For(name == "BF16R"   ? Fmt::kBF16R
                          : name == "MXFP4" ? Fmt::kMXFP4
                          : name == "INT4"  ? Fmt::kINT4
                                            : Fmt::kQ4GR);
    int stages, vec_dim, entries, block, bits;
    WASTE_RETURN_IF_ERROR(GetSmallInt(j, w, "stages", 0, 8, &stages));
    WASTE_RETURN_IF_ERROR(GetSmallInt(j, w, "vec_dim", 1, 128, &vec_dim));
    WASTE_RETURN_IF_ERROR(GetSmallInt(j, w, "entries", 0, 256, &entries));
    WASTE_RETURN_IF_ERROR(GetSmallInt(j, w, "index_block", 0, 4096, &block, 0));
    WASTE_RETURN_IF_ERROR(GetSmallInt(j, w, "index_bits", 4, 16, &bits));
    // Q4GR's group is the largest of 128, 64, 32 that the widths allow.
    const bool q4_group = q->fmt == Fmt::kQ4GR && (vec_dim == 32 || vec_dim == 64);
    if (stages != 0 || (vec_dim != q->vec_dim && !q4_group) || entries != 0 || block != 0 ||
        bits != q->index_bits)
      return Status::Error("expert_quant: " + name + " needs stages 0, vec_dim " +
                           std::to_string(q->vec_dim) + (q->fmt == Fmt::kQ4GR ? " (or 64, 32)" : "") +
                           ", entries 0, index_block 0, index_bits " +
                           std::to_string(q->index_bits));
    q->vec_dim = vec_dim;
    return Status::Ok();
  }
  WASTE_RETURN_IF_ERROR(GetSmallInt(j, w, "stages", 1, 8, &q->stages));
  WASTE_RETURN_IF_ERROR(GetSmallInt(j, w, "vec_dim", 1, 64, &q->vec_dim));
  WASTE_RETURN_IF_ERROR(GetSmallInt(j, w, "entries", 1, 256, &q->entries));
  WASTE_RETURN_IF_ERROR(GetSmallInt(j, w, "index_block", 0, 4096, &q->index_block, 0));
  WASTE_RETURN_IF_ERROR(GetSmallInt(j, w, "index_bits", 6, 8, &q->index_bits, 8));
  if (q->vec_dim != 8) return Status::Error("expert_quant.vec_dim must be 8");
  if (q->index_block != 0 && q->index_block != 64)
    return Status::Error("expert_quant.index_block must be 0 or 64, not " +
                         std::to_string(q->index_block));
  if (q->index_bits == 6) {
    if (q->stages != 4 || q->entries != 64)
      return Status::Error("expert_quant: index_bits 6 (VQ4P) needs 4 stages of 64 entries");
    q->fmt = Fmt::kVQ4P;
  } else if (q->index_bits == 8) {
    q->fmt = q->stages == 2 ? Fmt::kVQ2R : Fmt::kVQ3R;
  } else {
    return Status::Error("expert_quant.index_bits must be 8 or 6");
  }
  if (auto f = j.find("fmt"); f != j.end() && f->is_string()) {
    const std::string s = f->get<std::string>();
    const bool consistent = (s == "VQ4P" && q->fmt == Fmt::kVQ4P) ||
                            (s == "VQ3R" && q->fmt == Fmt::kVQ3R) ||
                            (s == "VQ2R" && q->fmt == Fmt::kVQ2R) ||
                            // WARP's converter names any 8-bit format by its stage count
                            ((s == "VQ3R" || s == "VQ2R") && q->index_bits == 8);
    if (!consistent)
      return Status::Error("expert_quant.fmt \"" + s + "\" disagrees with stages " +
                           std::to_string(q->stages) + " / index_bits " +
                           std::to_string(q->index_bits));
  }
  return Status::Ok();
}

Status ParseTensor(const json& e, size_t i, TrunkTensor* t) {
  std::string w = "trunk[" + std::to_string(i) + "]";
  if (!e.is_object()) return Status::Error(w + " is not an object");
  const auto name = e.find("name");
  if (name == e.end() || !name->is_string() || name->get<std::string>().empty() ||
      name->get<std::string>().size() > 256)
    return Status::Error(w + ".name is missing or not a short string");
  t->name = name->get<std::string>();
  w += " (" + t->name + ")";
  int fmt;
  WASTE_RETURN_IF_ERROR(GetSmallInt(e, w, "fmt", 0, 255, &fmt));
  if (!format::IsTrunkFmt(fmt))
    return Status::Error(w + ".fmt " + std::to_string(fmt) + " is not a trunk format");
  t->fmt = static_cast<Fmt>(fmt);
  if (auto d = e.find("dtype"); d != e.end() && !d->is_null()) {
    if (!d->is_string() || (d->get<std::string>() != "bf16" && d->get<std::string>() != "f16"))
      return Status::Error(w + ".dtype must be \"f16\" or \"bf16\"");
    if (t->fmt != Fmt::kF16) return Status::Error(w + ".dtype is only meaningful for fmt 1");
    t->bf16 = d->get<std::string>() == "bf16";
  }
  const auto shape = e.find("shape");
  if (shape == e.end() || !shape->is_array() || shape->empty() || shape->size() > 4)
    return Status::Error(w + ".shape must be a list of 1 to 4 dimensions");
  t->elements = 1;
  for (const json& d : *shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > kMaxTensorDim)
      return Status::Error(w + ".shape holds " + d.dump() + ", not a dimension in [1, 2^26]");
    t->shape.push_back(d.get<int64_t>());
    t->elements *= d.get<int64_t>();
    if (t->elements > kMaxTensorElements) return Status::Error(w + ".shape is too large");
  }
  uint64_t v;
  WASTE_RETURN_IF_ERROR(GetU64(e, w, "off", UINT64_MAX / 2, &v));
  t->offset = v;
  const int64_t cols = t->shape.back();
  const int64_t rows = t->elements / cols;
  switch (t->fmt) {
    case Fmt::kF32:
      t->payload_bytes = static_cast<uint64_t>(t->elements) * 4;
      break;
    case Fmt::kF16:
      t->payload_bytes = static_cast<uint64_t>(t->elements) * 2;
      break;
    default: {
      WASTE_RETURN_IF_ERROR(GetSmallInt(e, w, "group", 1, 1 << 16, &t->group, 128));
      WASTE_RETURN_IF_ERROR(GetU64(e, w, "scale_off", UINT64_MAX / 2, &v));
      t->scale_offset = v;
      const int bits = t->fmt == Fmt::kQ8G ? 8 : t->fmt == Fmt::kQ4G ? 4 : 3;
      if (bits == 4 && t->group % 2 != 0) return Status::Error(w + ".group must be even for Q4G");
      const format::GroupedShape g{bits, t->group, rows, cols};
      t->payload_bytes = static_cast<uint64_t>(g.payload_bytes());
      t->scale_bytes = static_cast<uint64_t>(g.scale_bytes());
    }
  }
  if (e.contains("bytes")) {  // informative in WARP's writer; must not contradict the shape
    WASTE_RETURN_IF_ERROR(GetU64(e, w, "bytes", UINT64_MAX / 2, &v));
    if (v < t->payload_bytes)
      return Status::Error(w + ".bytes " + std::to_string(v) + " is less than the " +
                           std::to_string(t->payload_bytes) + " its shape and format need");
  }
  return Status::Ok();
}

Status CheckTensorAgainstSpec(const TrunkTensor& t, const TensorSpec& s) {
  const std::string w = "manifest.json: trunk tensor " + t.name;
  int64_t want = 1;
  for (int64_t d : s.shape) want *= d;
  if (s.storage == Storage::kF32) {
    if (t.fmt != Fmt::kF32) return Status::Error(w + " must be F32 (fmt 0)");
    if (t.elements != want)
      return Status::Error(w + " has " + std::to_string(t.elements) +
                           " elements, the config needs " + std::to_string(want));
    return Status::Ok();
  }
  if (t.shape.size() != 2 || t.shape[0] != s.shape[0] || t.shape[1] != s.shape[1])
    return Status::Error(w + " has shape " + json(t.shape).dump() + ", the config needs " +
                         json(s.shape).dump());
  return Status::Ok();
}

int JsonDepth(std::string_view text) {
  int depth = 0, worst = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      worst = std::max(worst, ++depth);
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return worst;
}

}  // namespace

Result<nlohmann::json> ParseJson(std::string_view text, const std::string& what) {
  if (JsonDepth(text) > kMaxJsonDepth)
    return Status::Error(what + ": nested deeper than " + std::to_string(kMaxJsonDepth) +
                         " levels");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    return Status::Error(what + ": not valid JSON: " + e.what());
  }
}

namespace {

// The field `key` of `obj` when present and not null.
const json* Present(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

Status JsonString(const json& obj, const std::string& where, const char* key, std::string* out) {
  const json* v = Present(obj, key);
  if (!v) return Status::Ok();
  if (!v->is_string()) return Status::Error(where + key + " is not a string");
  *out = v->get<std::string>();
  return Status::Ok();
}

Status JsonInt(const json& obj, const std::string& where, const char* key, int64_t lo, int64_t hi,
               int64_t* out) {
  const json* v = Present(obj, key);
  if (!v) return Status::Ok();
  if (!v->is_number_integer()) return Status::Error(where + key + " is not an integer");
  // An unsigned value above INT64_MAX is out of every range asked for here.
  const bool above = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX};
  if (above || v->get<int64_t>() < lo || v->get<int64_t>() > hi)
    return Status::Error(where + key + " = " + v->dump() + " is outside [" +
                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
  *out = v->get<int64_t>();
  return Status::Ok();
}

Status JsonNumber(const json& obj, const std::string& where, const char* key, double lo, double hi,
                  double* out) {
  const json* v = Present(obj, key);
  if (!v) return Status::Ok();
  if (!v->is_number()) return Status::Error(where + key + " is not a number");
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi))
    return Status::Error(where + key + " = " + v->dump() + " is out of range");
  *out = d;
  return Status::Ok();
}

Status JsonBool(const json& obj, const std::string& where, const char* key, bool* out) {
  const json* v = Present(obj, key);
  if (!v) return Status::Ok();
  if (!v->is_boolean()) return Status::Error(where + key + " is not true or false");
  *out = v->get<bool>();
  return Status::Ok();
}

ExpertQuant ExpertQuant::For(Fmt fmt) {
  ExpertQuant q;
  q.fmt = fmt;
  if (fmt == Fmt::kVQ2R) q.stages = 2;
  if (fmt == Fmt::kVQ4P) q.stages = 4, q.entries = 64, q.index_bits = 6;
  if (fmt == Fmt::kBF16R) q.stages = 0, q.entries = 0, q.index_block = 0, q.index_bits = 16;
  if (fmt == Fmt::kMXFP4)
    q.stages = 0, q.vec_dim = format::kMxfp4Block, q.entries = 0, q.index_block = 0,
    q.index_bits = 4;
  if (fmt == Fmt::kINT4)
    q.stages = 0, q.vec_dim = format::kInt4Group, q.entries = 0, q.index_block = 0,
    q.index_bits = 4;
  if (fmt == Fmt::kQ4GR)
    q.stages = 0, q.vec_dim = format::kQ4grGroup, q.entries = 0, q.index_block = 0,
    q.index_bits = 4;
  return q;
}

int64_t RecordLayout::index_bytes(int m, const ExpertQuant& q) const {
  const int64_t padded_rows =
      q.index_block ? (rows[m] + q.index_block - 1) / q.index_block * q.index_block : rows[m];
  return padded_rows * (cols[m] / q.vec_dim) * q.bytes_per_vector();
}

Result<RecordLayout> RecordLayout::For(const ModelConfig& c, const ExpertQuant& q) {
  RecordLayout r;
  if (c.n_experts == 0) return r;
  r.rows[0] = r.rows[1] = c.moe_inter;
  r.cols[0] = r.cols[1] = c.expert_width();
  r.rows[2] = c.expert_width();
  r.cols[2] = c.moe_inter;
  uint64_t off = sizeof(format::ExpertHeader);
  for (int m = 0; m < format::kMatrices; ++m) {
    r.matrix_off[m] = static_cast<uint32_t>(off);
    off += static_cast<uint64_t>(r.index_bytes(m, q));
  }
  r.scales_off = static_cast<uint32_t>(off);
  const uint64_t all_rows = static_cast<uint64_t>(r.rows[0] + r.rows[1] + r.rows[2]);
  if (q.fmt == format::Fmt::kMXFP4 || q.fmt == format::Fmt::kQ4GR || q.fmt == format::Fmt::kINT4) {
    if (c.expert_width() % q.vec_dim != 0 || c.moe_inter % q.vec_dim != 0)
      return Status::Error("config: " + std::string(format::FmtName(q.fmt)) +
                           " experts need input and intermediate widths that are multiples of " +
                           std::to_string(q.vec_dim) + " (the scale's block)");
    for (int m = 0; m < format::kMatrices; ++m)
      off += static_cast<uint64_t>(r.rows[m] * (r.cols[m] / q.vec_dim) *
                                   q.scale_bytes_per_vector());
  } else if (!q.lossless()) {
    off += 2 * all_rows;
  }
  if (c.expert_bias) {
    r.bias_off = static_cast<uint32_t>(off);
    off += 4 * all_rows;
  }
  const uint64_t padded = (off + format::kAlign - 1) / format::kAlign * format::kAlign;
  if (padded > (uint64_t{1} << 31))
    return Status::Error("config: one expert record would be " + std::to_string(padded) +
                         " bytes, more than the format's 2 GiB");
  r.payload_end = static_cast<uint32_t>(off);
  r.record_bytes = static_cast<uint32_t>(padded);
  return r;
}

Result<Manifest> Manifest::Parse(std::string_view text) {
  auto doc = ParseJson(text, "manifest.json");
  if (!doc.ok()) return doc.status();
  const json& j = *doc;
  if (!j.is_object()) return Status::Error("manifest.json: not a JSON object");
  Manifest m;

  const auto fv = j.find("format_version");
  if (fv == j.end()) return Status::Error("manifest.json: format_version is missing");
  if (!fv->is_number_integer() || fv->get<int64_t>() != format::kFormatVersion)
    return Status::Error("manifest.json: format_version " + fv->dump() + ", this build reads " +
                         std::to_string(format::kFormatVersion));
  if (auto a = j.find("arch"); a != j.end() && a->is_string()) m.arch = a->get<std::string>();
  m.tensor_prefix = DefaultTensorPrefix(j.value("config", json()));
  if (auto p = j.find("tensor_prefix"); p != j.end() && !p->is_null()) {
    if (!p->is_string() || p->get<std::string>().size() > 64)
      return Status::Error("manifest.json: tensor_prefix is not a short string");
    m.tensor_prefix = p->get<std::string>();
  }

  const auto cfg = j.find("config");
  if (cfg == j.end()) return Status::Error("manifest.json: config is missing");
  m.config_json = *cfg;
  auto config = ModelConfig::FromJson(m.config_json);
  if (!config.ok()) return config.status().Prefixed("manifest.json");
  m.config = *config;
  const ModelConfig& c = m.config;

  if (c.n_experts > 0) {
    WASTE_RETURN_IF_ERROR(
        ParseExpertQuant(j.value("expert_quant", json()), &m.quant).Prefixed("manifest.json"));
  }
  auto layout = RecordLayout::For(c, m.quant);
  if (!layout.ok()) return layout.status().Prefixed("manifest.json");
  m.record = *layout;

  // Expert banks: exactly the MoE layers, each with the size its records imply.
  const auto layers = j.find("layers");
  if (c.n_experts > 0 && (layers == j.end() || !layers->is_object()))
    return Status::Error("manifest.json: layers is missing or not an object");
  if (layers != j.end() && layers->is_object()) {
    for (const auto& [key, e] : layers->items()) {
      int L = -1;
      // The key must be the layer number written plainly: "01" would name
      // layer 1 a second time.
      if (key.empty() || key.size() > 4 || !std::all_of(key.begin(), key.end(), ::isdigit) ||
          (L = std::stoi(key)) >= c.n_layers || !c.is_moe_layer(L) || key != std::to_string(L))
        return Status::Error("manifest.json: layers has an entry \"" + key +
                             "\" that is not a MoE layer of this config");
      const std::string w = "manifest.json: layers." + key;
      if (!e.is_object()) return Status::Error(w + " is not an object");
      ExpertBank b;
      b.layer = L;
      const auto file = e.find("file");
      b.file = "experts-L" + std::to_string(L) + ".bin";
      if (file == e.end() || !file->is_string() || file->get<std::string>() != b.file)
        return Status::Error(w + ".file must be \"" + b.file + "\"");
      WASTE_RETURN_IF_ERROR(GetSmallInt(e, w, "experts", 0, 1 << 16, &b.experts));
      if (b.experts != c.n_experts)
        return Status::Error(w + ".experts = " + std::to_string(b.experts) + ", the config says " +
                             std::to_string(c.n_experts));
      WASTE_RETURN_IF_ERROR(GetSmallInt(e, w, "codebook_base", 0, 1 << 24, &b.codebook_base));
      WASTE_RETURN_IF_ERROR(GetU64(e, w, "bytes", UINT64_MAX / 2, &b.bytes));
      const uint64_t want = uint64_t{m.record.record_bytes} * static_cast<uint64_t>(b.experts);
      if (b.bytes != want)
        return Status::Error(w + ".bytes = " + std::to_string(b.bytes) + ", but " +
                             std::to_string(b.experts) + " records of " +
                             std::to_string(m.record.record_bytes) + " bytes are " +
                             std::to_string(want));
      m.banks.push_back(b);
    }
  }
  std::sort(m.banks.begin(), m.banks.end(),
            [](const ExpertBank& a, const ExpertBank& b) { return a.layer < b.layer; });
  for (int L = 0; L < c.n_layers; ++L) {
    if (c.is_moe_layer(L) && !m.Bank(L))
      return Status::Error("manifest.json: layers has no bank for MoE layer " + std::to_string(L));
  }

  // Trunk index, then the tensors the forward pass needs.
  const auto trunk = j.find("trunk");
  if (trunk == j.end() || !trunk->is_array())
    return Status::Error("manifest.json: trunk is missing or not a list");
  if (trunk->size() > kMaxTensors)
    return Status::Error("manifest.json: trunk lists too many tensors");
  std::set<std::string> names;
  for (size_t i = 0; i < trunk->size(); ++i) {
    TrunkTensor t;
    WASTE_RETURN_IF_ERROR(ParseTensor((*trunk)[i], i, &t).Prefixed("manifest.json"));
    if (!names.insert(t.name).second)
      return Status::Error("manifest.json: trunk lists " + t.name + " twice");
    m.trunk.push_back(std::move(t));
  }
  for (const TensorSpec& s : TrunkSpec(c)) {
    const TrunkTensor* t = m.FindTensor(s.name);
    if (!t) return Status::Error("manifest.json: trunk has no tensor " + m.tensor_prefix + s.name);
    WASTE_RETURN_IF_ERROR(CheckTensorAgainstSpec(*t, s));
  }
  return m;
}

const TrunkTensor* Manifest::FindTensor(std::string_view name) const {
  const std::string full = tensor_prefix + std::string(name);
  for (const TrunkTensor& t : trunk) {
    if (t.name == full) return &t;
  }
  return nullptr;
}

const ExpertBank* Manifest::Bank(int layer) const {
  for (const ExpertBank& b : banks) {
    if (b.layer == layer) return &b;
  }
  return nullptr;
}

json Manifest::ToJson() const {
  json j;
  j["format_version"] = format::kFormatVersion;
  j["arch"] = arch.empty() ? config.model_type : arch;
  j["tensor_prefix"] = tensor_prefix;
  j["config"] = config_json;
  if (config.n_experts > 0) {
    j["expert_quant"] = {{"fmt", std::string(format::FmtName(quant.fmt))},
                         {"stages", quant.stages},
                         {"vec_dim", quant.vec_dim},
                         {"entries", quant.entries},
                         {"index_block", quant.index_block},
                         {"index_bits", quant.index_bits},
                         {"bits_per_weight", quant.bits_per_weight()}};
  }
  json layers = json::object();
  for (const ExpertBank& b : banks) {
    layers[std::to_string(b.layer)] = {{"file", b.file},
                                       {"experts", b.experts},
                                       {"bytes", b.bytes},
                                       {"codebook_base", b.codebook_base}};
  }
  j["layers"] = layers;
  json tensors = json::array();
  for (const TrunkTensor& t : trunk) {
    json e = {{"name", t.name},
              {"fmt", static_cast<int>(t.fmt)},
              {"off", t.offset},
              {"shape", t.shape},
              {"bytes", t.stored_bytes()}};
    if (t.fmt == Fmt::kF16) e["dtype"] = t.bf16 ? "bf16" : "f16";
    if (t.scale_bytes > 0) {
      e["group"] = t.group;
      e["scale_off"] = t.scale_offset;
    }
    tensors.push_back(std::move(e));
  }
  j["trunk"] = tensors;
  return j;
}

}  // namespace waste
