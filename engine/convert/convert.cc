#include "engine/convert/convert.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <nlohmann/json.hpp>

#include "engine/convert/checkpoint.h"
#include "engine/convert/source_model.h"
#include "engine/convert/tokenizer_import.h"
#include "engine/format/container.h"
#include "engine/format/encoding.h"
#include "engine/format/writer.h"
#include "engine/tokenizer/tokenizer.h"

namespace waste::convert {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using format::Fmt;
using nlohmann::json;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t Elements(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string Duration(double s) {
  char buf[32];
  if (s < 90)
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  else if (s < 5400)
    std::snprintf(buf, sizeof buf, "%.0f min", s / 60);
  else
    std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  return buf;
}

// The first error of several threads.
class FirstError {
 public:
  void Set(const Status& s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (first_.ok()) first_ = s;
  }
  Status Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_;
  }

 private:
  mutable std::mutex mu_;
  Status first_;
};

// Writes `text` to dir/name through a temporary file and a rename.
Status WriteAtomically(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string tmp = dir + "/" + name + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error(tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return Status::Error(tmp + ": write: " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (!synced) return Status::Error(tmp + ": fsync: " + std::strerror(errno));
  if (rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0)
    return Status::Error(name + ": rename: " + std::strerror(errno));
  return Status::Ok();
}

// The checkpoint's weights the container needs, all found and checked.
struct Plan {
  std::vector<TensorSpec> trunk;
  std::vector<std::vector<RowSpan>> trunk_src;     // [trunk.size()]: where each lies
  std::vector<std::vector<ExpertMatrix>> experts;  // [n_layers][experts * 3], empty for dense layers
  std::vector<uint64_t> layer_source_bytes;   // [n_layers]
};

uint64_t StoredBytes(const Weight& w) {
  return w.data->bytes + (w.scale ? w.scale->bytes : 0);
}

Status CheckShape(const Weight& w, const std::vector<int64_t>& want, bool by_count) {
  const bool ok = by_count ? Elements(w.shape) == Elements(want) : w.shape == want;
  if (!ok)
    return Status::Error(w.where() + " is " + w.describe() + ", the config needs " +
                         ShapeText(want));
  return Status::Ok();
}

Result<Plan> MakePlan(const Checkpoint& ck, const SourceModel& sm, Fmt expert_fmt) {
  Plan p;
  const ModelConfig& c = sm.shape;
  p.trunk = TrunkSpec(c);
  for (const TensorSpec& s : p.trunk) {
    auto w = sm.FindTrunk(ck, s.name, s.shape);
    if (!w.ok()) return w.status();
    if (w->size() == 1)
      WASTE_RETURN_IF_ERROR(
          CheckShape(w->front().weight, s.shape, s.storage == waste::Storage::kF32));
    p.trunk_src.push_back(std::move(*w));
  }
  p.experts.resize(c.n_layers);
  p.layer_source_bytes.assign(c.n_layers, 0);
  for (int L = 0; L < c.n_layers; ++L) {
    if (!c.is_moe_layer(L)) continue;
    for (int e = 0; e < c.n_experts; ++e) {
      for (int m = 0; m < 3; ++m) {
        auto x = sm.FindExpert(ck, L, e, m);
        if (!x.ok()) return x.status();
        if (expert_fmt == Fmt::kMXFP4 && x->weight.storage != Storage::kMxfp4)
          return Status::Error("--expert-format mxfp4 keeps the checkpoint's MXFP4 experts bit "
                               "for bit, and " + x->weight.where() + " is " +
                               x->weight.describe());
        if (expert_fmt == Fmt::kINT4 && x->weight.storage != Storage::kInt4)
          return Status::Error("--expert-format int4 keeps the checkpoint's compressed-tensors "
                               "INT4 experts bit for bit, and " + x->weight.where() + " is " +
                               x->weight.describe());
        // Its share of the tensor (a fused tensor holds every expert).
        p.layer_source_bytes[L] += StoredBytes(x->weight) *
                                   static_cast<uint64_t>(x->rows * x->cols) /
                                   static_cast<uint64_t>(x->weight.rows * x->weight.cols);
        p.experts[L].push_back(std::move(*x));
      }
    }
  }
  return p;
}

// What identifies a conversion, so --resume never mixes two.
json Fingerprint(const Checkpoint& ck, const ConvertOptions& o, int trunk_bits) {
  json shards = json::object();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ck.dir(), ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0)
      shards[n] = static_cast<uint64_t>(e.file_size(ec));
  }
  return {{"config", ck.config()},
          {"shards", shards},
          {"expert_format", std::string(format::FmtName(o.expert_fmt))},
          {"trunk_bits", trunk_bits},
          {"head_bits", o.head_bits},
          {"fit",
           {{"sample_experts", o.fit.sample_experts},
            {"max_vectors", o.fit.max_vectors},
            {"iterations", o.fit.iterations},
            {"seed", o.fit.seed}}}};
}

json LayerJson(const LayerSummary& l) {
  return {{"layer", l.layer},         {"experts", l.experts},
          {"mean_rel_error", l.mean_rel_error}, {"max_rel_error", l.max_rel_error},
          {"source_bytes", l.source_bytes},     {"seconds", l.seconds}};
}

// Throws json::exception on a damaged state, *field then naming the field.
LayerSummary LayerFromJson(const json& j, std::string* field) {
  const auto at = [&](const char* key) -> const json& {
    *field = std::string("layers.") + key;
    return j.at(key);
  };
  LayerSummary l;
  l.layer = at("layer").get<int>();
  l.experts = at("experts").get<int>();
  l.mean_rel_error = at("mean_rel_error").get<double>();
  l.max_rel_error = at("max_rel_error").get<double>();
  l.source_bytes = at("source_bytes").get<uint64_t>();
  l.seconds = at("seconds").get<double>();
  return l;
}

// Refuses an output directory that is not ours to write; returns the
// resume state when there is one to continue.
Result<json> CheckOutput(const ConvertOptions& o, const json& fingerprint) {
  std::error_code ec;
  if (!fs::exists(o.out, ec)) return json();
  if (!fs::is_directory(o.out, ec)) return Status::Error(o.out + ": exists and is not a directory");
  if (fs::exists(o.out + "/manifest.json", ec))
    return Status::Error(o.out + " already holds a container (manifest.json); remove it or "
                                 "choose another directory");
  const std::string state_path = o.out + "/" + kStateFile;
  if (fs::exists(state_path, ec)) {
    if (!o.resume)
      return Status::Error(o.out + " holds an interrupted conversion (" + kStateFile +
                           "); pass --resume to continue it, or remove the directory");
    auto text = ReadSmallFile(state_path, 256u << 20);
    if (!text.ok()) return text.status();
    auto state = ParseJson(*text, kStateFile);
    if (!state.ok()) return state.status();
    if (!state->is_object() || !state->contains("source") || (*state)["source"] != fingerprint)
      return Status::Error(o.out + " holds an interrupted conversion of another checkpoint or "
                                   "with other options; remove it or choose another directory");
    return *state;
  }
  if (!fs::is_empty(o.out, ec))
    return Status::Error(o.out + " is not empty and holds no conversion to resume; choose an "
                                 "empty or new directory");
  return json();
}

class Converter {
 public:
  Converter(const ConvertOptions& o, const Checkpoint& ck, const SourceModel& sm, const Plan& p,
            int trunk_bits)
      : o_(o), ck_(ck), sm_(sm), p_(p), trunk_bits_(trunk_bits) {}

  Status Trunk(ContainerWriter& w);
  Status Layer(ContainerWriter& w, int L, LayerSummary* out);
  void Say(const std::string& line) const {
    if (o_.progress) o_.progress(line);
  }

 private:
  Result<std::vector<float>> FitCodebooks(const ExpertQuant& q, int L) const;

  const ConvertOptions& o_;
  const Checkpoint& ck_;
  const SourceModel& sm_;
  const Plan& p_;
  int trunk_bits_;
};

Status Converter::Trunk(ContainerWriter& w) {
  const auto t0 = Clock::now();
  for (size_t i = 0; i < p_.trunk.size(); ++i) {
    const TensorSpec& s = p_.trunk[i];
    const std::vector<RowSpan>& spans = p_.trunk_src[i];
    const Weight& src = spans.front().weight;  // the only one, but for gathered rows
    for (const RowSpan& r : spans) ck_.Prefetch(r.weight);
    Fmt fmt = Fmt::kF32;
    bool bf16 = false;
    if (s.storage == waste::Storage::kMatrix) {
      const bool edge = s.name == "model.embed_tokens.weight" || s.name == "lm_head.weight";
      if (trunk_bits_ == 16)
        fmt = Fmt::kF16, bf16 = true;
      else if (s.name == "lm_head.weight" && o_.head_bits == 4)
        fmt = Fmt::kQ4G;
      else
        fmt = edge || trunk_bits_ == 8 ? Fmt::kQ8G : Fmt::kQ4G;
    }
    FirstError err;
    const int64_t cols = s.shape.back();
    WASTE_RETURN_IF_ERROR(w.AddTensorRows(
        s.name, s.shape,
        [&](int64_t first, int64_t rows, float* dst) {
          // The spec's rows and the checkpoint's agree in element order
          // (shapes were checked equal, or equal in count for vectors).
          const int64_t a = first * cols, n = rows * cols;
          if (spans.size() > 1) {  // rows gathered from several tensors (FindTrunk)
            err.Set(SourceModel::ReadSpans(ck_, spans, first, rows, dst));
          } else if (src.cols == cols) {
            err.Set(ck_.ReadRows(src, first, rows, dst));
            ck_.ReleaseRows(src, first, rows);  // a 2 GB embedding never sits in memory whole
          } else {  // a vector stored with another last dimension: whole rows of the source
            std::vector<float> all(static_cast<size_t>(src.rows * src.cols));
            err.Set(ck_.ReadRows(src, 0, src.rows, all.data()));
            std::memcpy(dst, all.data() + a, static_cast<size_t>(n) * 4);
          }
        },
        fmt, bf16));
    WASTE_RETURN_IF_ERROR(err.Get());
    for (const RowSpan& r : spans) ck_.Release(r.weight);
  }
  char line[128];
  std::snprintf(line, sizeof line, "trunk: %zu tensors in %.1f s", p_.trunk.size(), Since(t0));
  Say(line);
  return Status::Ok();
}

Result<std::vector<float>> Converter::FitCodebooks(const ExpertQuant& q, int L) const {
  const ModelConfig& c = sm_.shape;
  const int sample = std::clamp(o_.fit.sample_experts, 1, c.n_experts);
  std::vector<float> books;
  for (int m = 0; m < 3; ++m) {
    const int64_t rows = sm_.expert_rows[m], cols = sm_.expert_cols[m];
    const int64_t per_expert = rows * cols / 8;
    const int64_t step = std::max<int64_t>(1, per_expert * sample / std::max(1, o_.fit.max_vectors));
    std::vector<float> vectors, w(static_cast<size_t>(rows * cols));
    for (int k = 0; k < sample; ++k) {
      const int e = static_cast<int>(static_cast<int64_t>(k) * c.n_experts / sample);
      const ExpertMatrix& src = p_.experts[L][static_cast<size_t>(e) * 3 + m];
      ck_.Prefetch(src.weight);
      WASTE_RETURN_IF_ERROR(SourceModel::ReadExpert(ck_, src, w.data()));
      AppendNormalizedVectors(w.data(), rows, cols, step, &vectors);
    }
    VqFitOptions fit = o_.fit;
    fit.seed = o_.fit.seed * 131 + static_cast<uint64_t>(L * 3 + m);
    fit.threads = o_.jobs;
    const std::vector<float> b = FitResidualCodebooks(vectors, q.stages, q.entries, fit);
    books.insert(books.end(), b.begin(), b.end());
  }
  return books;
}

Status Converter::Layer(ContainerWriter& w, int L, LayerSummary* out) {
  const auto t0 = Clock::now();
  const ModelConfig& c = sm_.shape;
  const ExpertQuant q = w.quant();
  const RecordLayout lay = w.record_layout();
  std::vector<float> books;
  if (!q.direct()) {
    auto b = FitCodebooks(q, L);
    if (!b.ok()) return b.status();
    books = std::move(*b);
  }
  WASTE_RETURN_IF_ERROR(w.AddCodebooks(L, books));
  const size_t per_matrix_books = static_cast<size_t>(q.stages) * q.entries * 8;

  std::vector<double> rel(static_cast<size_t>(c.n_experts) * 3, 0.0);
  FirstError err;
  std::atomic<int> done{0};
  std::mutex say_mu;
  auto last_say = Clock::now();
  // Each expert is asked for whole before it is decoded, and the next one
  // too, so the reads are large and overlap the arithmetic.
  WASTE_RETURN_IF_ERROR(w.WriteBank(L, [&](int e, std::span<uint8_t> rec) {
    for (int k = e; k < std::min(e + 2, c.n_experts); ++k)
      for (int m = 0; m < 3; ++m)
        ck_.Prefetch(p_.experts[L][static_cast<size_t>(k) * 3 + m].weight);
    std::vector<float> buf;
    std::array<std::vector<uint8_t>, 3> idx;
    std::array<std::vector<uint16_t>, 3> sc;
    uint8_t* fp4_scales = rec.data() + lay.scales_off;
    uint8_t* int4_scales = rec.data() + lay.scales_off;
    uint8_t* q4_scales = rec.data() + lay.scales_off;
    for (int m = 0; m < 3; ++m) {
      const ExpertMatrix& src = p_.experts[L][static_cast<size_t>(e) * 3 + m];
      const int64_t rows = lay.rows[m], cols = lay.cols[m];
      // A fused tensor (every expert's rows in one) is released after the layer.
      const bool own_tensor = src.rows * src.cols == src.weight.rows * src.weight.cols;
      if (q.fmt == Fmt::kMXFP4) {  // the checkpoint's bytes, row by row
        uint8_t* codes = rec.data() + lay.matrix_off[m];
        const int64_t blocks = cols / format::kMxfp4Block;
        for (int64_t r = 0; r < rows; ++r) {
          const Status st = ck_.ReadMxfp4Row(src.weight, src.first + r * src.step,
                                             codes + r * (cols / 2), fp4_scales + r * blocks);
          if (!st.ok()) {
            err.Set(st);
            return;
          }
        }
        fp4_scales += rows * blocks;
        if (own_tensor) ck_.Release(src.weight);
        continue;
      }
      if (q.fmt == Fmt::kINT4) {  // the checkpoint's bytes, row by row
        uint8_t* codes = rec.data() + lay.matrix_off[m];
        const int64_t scale_bytes = 2 * (cols / format::kInt4Group);
        for (int64_t r = 0; r < rows; ++r) {
          const Status st = ck_.ReadInt4Row(src.weight, src.first + r * src.step,
                                            codes + r * (cols / 2), int4_scales + r * scale_bytes);
          if (!st.ok()) {
            err.Set(st);
            return;
          }
        }
        int4_scales += rows * scale_bytes;
        if (own_tensor) ck_.Release(src.weight);
        continue;
      }
      buf.resize(static_cast<size_t>(rows * cols));
      const Status st = SourceModel::ReadExpert(ck_, src, buf.data());
      if (!st.ok()) {
        err.Set(st);
        return;
      }
      QuantError qe;
      if (q.fmt == Fmt::kQ4GR) {  // the trunk's Q4G encoder, one definition of the bytes
        const format::GroupedShape g{4, q.vec_dim, rows, cols};
        uint8_t* payload = rec.data() + lay.matrix_off[m];
        std::vector<uint16_t> gs(static_cast<size_t>(rows * g.groups_per_row()));
        format::QuantizeGrouped(g, buf.data(), payload, gs.data());
        std::memcpy(q4_scales, gs.data(), gs.size() * 2);
        q4_scales += gs.size() * 2;
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
          format::DequantizeGroupedRow(g, payload, gs.data(), r, row.data());
          for (int64_t i = 0; i < cols; ++i) {
            const double x = buf[static_cast<size_t>(r * cols + i)], d = x - row[i];
            qe.err2 += d * d;
            qe.norm2 += x * x;
          }
        }
      } else if (q.lossless()) {
        uint8_t* dst = rec.data() + lay.matrix_off[m];
        for (int64_t i = 0; i < rows * cols; ++i) {
          const uint16_t h = format::F32ToBf16(buf[i]);
          std::memcpy(dst + 2 * i, &h, 2);
          const double d = static_cast<double>(buf[i]) - format::Bf16ToF32(h);
          qe.err2 += d * d;
          qe.norm2 += static_cast<double>(buf[i]) * buf[i];
        }
      } else {
        idx[m].assign(static_cast<size_t>(q.stages * rows * cols / 8), 0);
        sc[m].assign(static_cast<size_t>(rows), 0);
        qe = QuantizeMatrix(buf.data(), rows, cols, books.data() + m * per_matrix_books, q.stages,
                            q.entries, o_.fit.isa, idx[m].data(), sc[m].data());
      }
      rel[static_cast<size_t>(e) * 3 + m] = qe.relative();
      if (own_tensor) ck_.Release(src.weight);
    }
    if (!q.direct())
      EncodeRecordPayload(lay, q, {idx[0], idx[1], idx[2]}, {sc[0], sc[1], sc[2]}, rec);
    if (lay.bias_off) {  // float32, after the scales (format/layout.h)
      uint8_t* dst = rec.data() + lay.bias_off;
      for (int m = 0; m < 3; ++m) {
        buf.resize(static_cast<size_t>(lay.rows[m]));
        const Status st = sm_.ReadExpertBias(ck_, L, e, m, buf.data());
        if (!st.ok()) {
          err.Set(st);
          return;
        }
        std::memcpy(dst, buf.data(), buf.size() * 4);
        dst += buf.size() * 4;
      }
    }
    const int n = ++done;
    std::lock_guard<std::mutex> lock(say_mu);
    if (Since(last_say) > 5.0 && n < c.n_experts) {
      last_say = Clock::now();
      const double s = Since(t0);
      char line[160];
      std::snprintf(line, sizeof line, "layer %d: %d/%d experts, %.0f MB/s", L, n, c.n_experts,
                    p_.layer_source_bytes[L] * (static_cast<double>(n) / c.n_experts) / 1e6 / s);
      Say(line);
    }
  }));
  WASTE_RETURN_IF_ERROR(err.Get());
  for (const ExpertMatrix& x : p_.experts[L])
    if (x.rows * x.cols != x.weight.rows * x.weight.cols) ck_.Release(x.weight);
  out->layer = L;
  out->experts = c.n_experts;
  out->source_bytes = p_.layer_source_bytes[L];
  double sum = 0;
  for (double r : rel) sum += r, out->max_rel_error = std::max(out->max_rel_error, r);
  out->mean_rel_error = rel.empty() ? 0 : sum / static_cast<double>(rel.size());
  out->seconds = Since(t0);
  return Status::Ok();
}

}  // namespace

Result<format::Fmt> ParseExpertFormat(std::string_view name) {
  std::string n(name);
  for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (n == "bf16" || n == "bf16r") return Fmt::kBF16R;
  if (n == "vq3r") return Fmt::kVQ3R;
  if (n == "vq2r") return Fmt::kVQ2R;
  if (n == "vq4p") return Fmt::kVQ4P;
  if (n == "mxfp4") return Fmt::kMXFP4;
  if (n == "int4") return Fmt::kINT4;
  if (n == "q4gr" || n == "q4g") return Fmt::kQ4GR;
  return Status::Error("expert format \"" + std::string(name) +
                       "\" (bf16, mxfp4, int4, q4gr, vq3r, vq2r, vq4p)");
}

Result<ConvertSummary> Convert(const ConvertOptions& o) {
  const auto t0 = Clock::now();
  const int trunk_bits = o.trunk_bits                  ? o.trunk_bits
                         : o.expert_fmt == Fmt::kBF16R ? 16
                         : o.expert_fmt == Fmt::kMXFP4 ? 16
                         : o.expert_fmt == Fmt::kINT4  ? 16
                                                       : 4;
  if (trunk_bits != 4 && trunk_bits != 8 && trunk_bits != 16)
    return Status::Error("trunk bits must be 4, 8 or 16");
  if (o.head_bits != 4 && o.head_bits != 8) return Status::Error("head bits must be 4 or 8");
  auto ck = Checkpoint::Open(o.src);
  if (!ck.ok()) return ck.status();
  auto sm = MapSource((*ck)->config());
  if (!sm.ok()) return sm.status();
  auto plan = MakePlan(**ck, *sm, o.expert_fmt);
  if (!plan.ok()) return plan.status();
  auto tok = ImportTokenizer(o.src, *sm);
  if (!tok.ok()) return tok.status();
  const json fingerprint = Fingerprint(**ck, o, trunk_bits);
  auto resume = CheckOutput(o, fingerprint);
  if (!resume.ok()) return resume.status();

  ConvertSummary sum;
  // K3's text config says kimi_linear; its family is named by the wrapper.
  sum.model_type = sm->shape.arch == Arch::kKimiK3 ? std::string(ArchName(Arch::kKimiK3))
                                                   : sm->shape.model_type;
  sum.source_bytes = (*ck)->shard_bytes();
  const ParamCount params = CountParams(sm->shape);
  sum.trunk_params = params.trunk;
  sum.expert_params = params.experts;
  const ModelConfig& c = sm->shape;
  Converter conv(o, **ck, *sm, *plan, trunk_bits);

  std::unique_ptr<ContainerWriter> w;
  bool trunk_done = false;
  std::vector<LayerSummary> layers;
  bool trunk_written = false;
  if (!resume->is_null())
    WASTE_RETURN_IF_ERROR(
        JsonBool(*resume, o.out + "/" + kStateFile + ": ", "trunk_done", &trunk_written));
  if (trunk_written) {
    auto r = ContainerWriter::Resume(o.out, (*resume)["writer"], o.jobs);
    if (!r.ok()) return r.status().Prefixed(std::string(o.out) + "/" + kStateFile);
    w = std::move(*r);
    trunk_done = true;
    std::string field = "layers";
    try {
      for (const json& l : resume->at("layers")) layers.push_back(LayerFromJson(l, &field));
    } catch (const json::exception& e) {
      return Status::Error(std::string(kStateFile) + ": " + field + ": " + e.what());
    }
    sum.layers_resumed = static_cast<int>(layers.size());
    conv.Say("resuming: trunk and " + std::to_string(layers.size()) + " of " +
             std::to_string(c.n_moe_layers()) + " layers already written");
  } else {
    auto r = ContainerWriter::Create(o.out, sm->config, o.expert_fmt, false, o.jobs);
    if (!r.ok()) return r.status();
    w = std::move(*r);
  }
  auto save_state = [&]() {
    json jl = json::array();
    for (const LayerSummary& l : layers) jl.push_back(LayerJson(l));
    const json state = {{"source", fingerprint},
                        {"writer", w->State()},
                        {"trunk_done", trunk_done},
                        {"layers", jl}};
    return WriteAtomically(o.out, kStateFile, state.dump(1));
  };
  WASTE_RETURN_IF_ERROR(save_state());

  if (!trunk_done) {
    WASTE_RETURN_IF_ERROR(conv.Trunk(*w));
    trunk_done = true;
    WASTE_RETURN_IF_ERROR(save_state());
  }
  uint64_t left_bytes = 0, done_bytes = 0;
  for (int L = 0; L < c.n_layers; ++L)
    if (c.is_moe_layer(L) && !w->HasBank(L)) left_bytes += plan->layer_source_bytes[L];
  const auto experts_t0 = Clock::now();
  for (int L = 0; L < c.n_layers; ++L) {
    if (!c.is_moe_layer(L) || w->HasBank(L)) continue;
    LayerSummary ls;
    WASTE_RETURN_IF_ERROR(conv.Layer(*w, L, &ls));
    layers.push_back(ls);
    WASTE_RETURN_IF_ERROR(save_state());
    done_bytes += ls.source_bytes;
    const double s = Since(experts_t0);
    const double rate = static_cast<double>(done_bytes) / std::max(s, 1e-9);
    char line[200];
    std::snprintf(line, sizeof line,
                  "layer %d (%zu/%d): %d experts, %.1f MB in %.1f s (%.0f MB/s), rel. error mean "
                  "%.4f max %.4f, %s left",
                  L, layers.size(), c.n_moe_layers(), ls.experts, ls.source_bytes / 1e6,
                  ls.seconds, ls.source_bytes / 1e6 / std::max(ls.seconds, 1e-9),
                  ls.mean_rel_error, ls.max_rel_error,
                  Duration(static_cast<double>(left_bytes - done_bytes) / std::max(rate, 1.0))
                      .c_str());
    conv.Say(line);
  }

  if (!tok->tokenizer_model.empty()) {
    WASTE_RETURN_IF_ERROR(w->WriteFile("tokenizer.model", tok->tokenizer_model));
    if (!tok->merges_txt.empty()) WASTE_RETURN_IF_ERROR(w->WriteFile("merges.txt", tok->merges_txt));
    if (!tok->pretokenizer_json.empty())
      WASTE_RETURN_IF_ERROR(w->WriteFile("pretokenizer.json", tok->pretokenizer_json));
    if (!tok->normalizer_json.empty())
      WASTE_RETURN_IF_ERROR(w->WriteFile("normalizer.json", tok->normalizer_json));
    if (!tok->specials_json.empty())
      WASTE_RETURN_IF_ERROR(w->WriteFile("specials.json", tok->specials_json));
    if (!tok->chat_json.empty()) WASTE_RETURN_IF_ERROR(w->WriteFile("chat.json", tok->chat_json));
    sum.tokenizer = "from " + tok->source;
    // The engine must be able to load what was written; if not, leave it out.
    auto loaded = Tokenizer::Load(o.out);
    if (!loaded.ok()) {
      for (const char* f : {"tokenizer.model", "merges.txt", "pretokenizer.json", "normalizer.json",
                            "specials.json", "chat.json"})
        fs::remove(o.out + "/" + f);
      sum.tokenizer = "none: " + loaded.status().message();
    } else if (!tok->note.empty()) {
      sum.tokenizer += " (" + tok->note + ")";
    }
  } else {
    sum.tokenizer = "none: " + tok->note;
  }
  WASTE_RETURN_IF_ERROR(w->Finish());
  fs::remove(o.out + "/" + std::string(kStateFile));

  std::sort(layers.begin(), layers.end(),
            [](const LayerSummary& a, const LayerSummary& b) { return a.layer < b.layer; });
  sum.layers = std::move(layers);
  std::error_code ec;
  sum.trunk_bytes = fs::file_size(o.out + "/trunk.bin", ec);
  for (int L = 0; L < c.n_layers; ++L)
    if (c.is_moe_layer(L))
      sum.expert_bytes += fs::file_size(o.out + "/experts-L" + std::to_string(L) + ".bin", ec);
  if (c.n_experts > 0) sum.expert_bytes += fs::file_size(o.out + "/codebooks.bin", ec);
  for (const auto& e : fs::directory_iterator(o.out, ec))
    if (e.is_regular_file()) sum.written_bytes += e.file_size();
  for (std::string& name : (*ck)->Unused())
    (sm->IsVisionTensor(name) ? sum.skipped_vision
     : sm->IsMtpTensor(name)  ? sum.skipped_mtp
                              : sum.unused)
        .push_back(std::move(name));
  for (const std::string& name : sum.unused) {
    const std::string p = sm->prefix + "model.layers.";
    if (name.rfind(p, 0) != 0) continue;
    const int L = std::atoi(name.c_str() + p.size());
    if (L >= c.n_layers &&
        std::find(sum.skipped_layers.begin(), sum.skipped_layers.end(), L) == sum.skipped_layers.end())
      sum.skipped_layers.push_back(L);
  }
  std::sort(sum.skipped_layers.begin(), sum.skipped_layers.end());
  sum.seconds = Since(t0);
  return sum;
}

}  // namespace waste::convert
