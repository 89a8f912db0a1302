#include "engine/convert/verify.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/convert/checkpoint.h"
#include "engine/convert/source_model.h"
#include "engine/format/container.h"
#include "engine/format/encoding.h"
#include "engine/kernels/matvec.h"

namespace waste::convert {
namespace {

using format::Fmt;

uint16_t U16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Matrix m of a checked record, as the engine computes with it: out[rows * cols].
void DecodeExpertMatrix(const Container& ct, int layer, const uint8_t* rec, int m, float* out) {
  const ExpertQuant& q = ct.manifest().quant;
  const RecordLayout& lay = ct.record_layout();
  const int64_t rows = lay.rows[m], cols = lay.cols[m];
  const uint8_t* base = rec + lay.matrix_off[m];
  if (q.fmt == Fmt::kMXFP4) {
    const uint8_t* scales = rec + lay.scales_off;
    for (int k = 0; k < m; ++k) scales += lay.rows[k] * (lay.cols[k] / format::kMxfp4Block);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const uint8_t b = base[i / 2];
      out[i] = format::E2m1ToF32(static_cast<uint8_t>((i & 1) ? b >> 4 : b)) *
               format::E8m0ToF32(scales[i / format::kMxfp4Block]);
    }
    return;
  }
  if (q.fmt == Fmt::kINT4) {
    const uint8_t* scales = rec + lay.scales_off;
    for (int k = 0; k < m; ++k) scales += 2 * lay.rows[k] * (lay.cols[k] / format::kInt4Group);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const uint8_t b = base[i / 2];
      out[i] = format::Int4ToF32(static_cast<uint8_t>((i & 1) ? b >> 4 : b)) *
               format::Bf16ToF32(U16(scales + 2 * (i / format::kInt4Group)));
    }
    return;
  }
  if (q.fmt == Fmt::kQ4GR) {
    const format::GroupedShape g{4, q.vec_dim, rows, cols};
    const uint8_t* scales = rec + lay.scales_off;
    for (int k = 0; k < m; ++k) scales += 2 * lay.rows[k] * (lay.cols[k] / q.vec_dim);
    std::vector<uint16_t> gs(static_cast<size_t>(rows * g.groups_per_row()));
    std::memcpy(gs.data(), scales, gs.size() * 2);  // the record's bytes need not be 2-aligned
    for (int64_t r = 0; r < rows; ++r)
      format::DequantizeGroupedRow(g, base, gs.data(), r, out + r * cols);
    return;
  }
  if (q.lossless()) {
    for (int64_t i = 0; i < rows * cols; ++i) out[i] = format::Bf16ToF32(U16(base + 2 * i));
    return;
  }
  const int64_t nvec = cols / q.vec_dim;
  const int bpv = q.bytes_per_vector();
  const int cb = ct.manifest().Bank(layer)->codebook_base + m * q.stages;
  int64_t scale_at = lay.scales_off;
  for (int k = 0; k < m; ++k) scale_at += 2 * lay.rows[k];
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = format::F16ToF32(U16(rec + scale_at + 2 * r));
    for (int64_t v = 0; v < nvec; ++v) {
      const int64_t pos = q.index_block
                              ? ((r / q.index_block * nvec + v) * q.index_block + r % q.index_block)
                              : r * nvec + v;
      uint8_t idx[8];
      if (q.index_bits == 6)
        format::UnpackVq4(base + pos * bpv, idx);
      else
        std::memcpy(idx, base + pos * bpv, static_cast<size_t>(q.stages));
      float acc[8] = {};
      for (int s = 0; s < q.stages; ++s) {
        const std::span<const float> book = ct.Codebook(cb + s);
        const int e = std::min<int>(idx[s], q.entries - 1);
        for (int i = 0; i < 8; ++i) acc[i] += book[static_cast<size_t>(e) * 8 + i];
      }
      for (int i = 0; i < 8; ++i) out[r * cols + v * 8 + i] = scale * acc[i];
    }
  }
}

double RelError(const float* got, const float* want, int64_t n) {
  double e = 0, w = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    e += d * d;
    w += static_cast<double>(want[i]) * want[i];
  }
  return w > 0 ? std::sqrt(e / w) : (e > 0 ? INFINITY : 0.0);
}

}  // namespace

Result<VerifyReport> Verify(const VerifyOptions& o) {
  auto ct = Container::Open(o.container);
  if (!ct.ok()) return ct.status();
  const ModelConfig& c = ct->config();
  const Manifest& man = ct->manifest();
  VerifyReport rep;
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };

  std::unique_ptr<Checkpoint> ck;
  SourceModel sm;
  if (!o.source.empty()) {
    auto opened = Checkpoint::Open(o.source);
    if (!opened.ok()) return opened.status();
    ck = std::move(*opened);
    auto mapped = MapSource(ck->config());
    if (!mapped.ok()) return mapped.status();
    sm = *mapped;
    if (sm.shape.hidden != c.hidden || sm.shape.n_layers != c.n_layers ||
        sm.shape.n_experts != c.n_experts || sm.shape.moe_inter != c.moe_inter ||
        sm.shape.vocab != c.vocab)
      return Status::Error(o.source + " is not the model of " + o.container +
                           " (their configs differ in shape)");
    rep.compared = true;
  }

  // Trunk: every tensor read back (Open has checked its bounds).
  std::vector<uint8_t> payload, scales;
  for (const TrunkTensor& t : man.trunk) {
    ++rep.trunk_tensors;
    if (Status st = ct->ReadTensor(t, &payload, &scales); !st.ok()) {
      rep.problems.push_back(st.message());
      continue;
    }
    bool finite = true;
    if (t.fmt == Fmt::kF32) {
      for (size_t i = 0; i + 4 <= payload.size() && finite; i += 4) {
        float v;
        std::memcpy(&v, payload.data() + i, 4);
        finite = std::isfinite(v);
      }
    }
    for (size_t i = 0; i + 2 <= scales.size() && finite; i += 2)
      finite = std::isfinite(format::F16ToF32(U16(scales.data() + i)));
    if (!finite) rep.problems.push_back("trunk.bin: tensor " + t.name + " holds a non-finite value");
    if (!ck || t.shape.size() != 2 || !finite) continue;
    // A tensor outside the prefix (WARP keeps K3's vision tower) has the
    // checkpoint's name.
    const bool prefixed = t.name.rfind(man.tensor_prefix, 0) == 0;
    Result<std::vector<RowSpan>> w = std::vector<RowSpan>{};
    if (prefixed) {
      w = sm.FindTrunk(*ck, t.name.substr(man.tensor_prefix.size()), t.shape);
    } else if (auto x = ck->Find(t.name); x.ok()) {
      const int64_t rows = x->rows;
      w = std::vector<RowSpan>{{std::move(*x), 0, rows}};
    } else {
      w = x.status();
    }
    if (!w.ok()) {
      rep.problems.push_back(w.status().message());
      continue;
    }
    kernels::MatrixView v;
    v.fmt = t.fmt;
    v.bf16 = t.bf16;
    v.rows = t.shape[0];
    v.cols = t.shape[1];
    v.group = t.group;
    v.payload = payload.data();
    v.scales = reinterpret_cast<const uint16_t*>(scales.data());
    std::vector<float> got(static_cast<size_t>(v.rows * v.cols)), want(got.size());
    for (int64_t r = 0; r < v.rows; ++r) kernels::DequantRow(v, r, got.data() + r * v.cols);
    int64_t have = 0, rows = 0;
    for (const RowSpan& r : *w) have += r.rows * r.weight.cols, rows += r.rows;
    if (have != v.rows * v.cols) {
      rep.problems.push_back("trunk.bin: tensor " + t.name + " has " +
                             std::to_string(v.rows * v.cols) + " values, the source " +
                             std::to_string(have));
      continue;
    }
    if (Status st = SourceModel::ReadSpans(*ck, *w, 0, rows, want.data()); !st.ok()) {
      rep.problems.push_back(st.message());
      continue;
    }
    const double e = RelError(got.data(), want.data(), static_cast<int64_t>(got.size()));
    if (e >= rep.trunk_max_rel_error) rep.trunk_max_rel_error = e, rep.trunk_worst = t.name;
    for (const RowSpan& r : *w) ck->Release(r.weight);
  }

  // Expert records: header and crc32 of every one; with a source, every matrix.
  std::vector<uint8_t> rec(ct->record_bytes());
  const RecordLayout& lay = ct->record_layout();
  std::vector<float> got, want;
  for (const ExpertBank& b : man.banks) {
    VerifyLayer vl;
    vl.layer = b.layer;
    int compared = 0;
    for (int e = 0; e < b.experts; ++e) {
      ++rep.records;
      if (Status st = ct->ReadRecord(b.layer, e, rec.data(), true); !st.ok()) {
        rep.problems.push_back(st.message());
        continue;
      }
      if (!ck) continue;
      for (int m = 0; m < 3; ++m) {
        const int64_t n = lay.rows[m] * lay.cols[m];
        got.resize(static_cast<size_t>(n));
        want.resize(static_cast<size_t>(n));
        DecodeExpertMatrix(*ct, b.layer, rec.data(), m, got.data());
        auto w = sm.FindExpert(*ck, b.layer, e, m);
        if (!w.ok()) {
          rep.problems.push_back(w.status().message());
          continue;
        }
        if (Status st = SourceModel::ReadExpert(*ck, *w, want.data()); !st.ok()) {
          rep.problems.push_back(st.message());
          continue;
        }
        if (w->rows == w->weight.rows) ck->Release(w->weight);
        double r = RelError(got.data(), want.data(), n);
        if (lay.bias_off) {  // biases are kept exactly: any difference is an error
          int64_t at = 0;
          for (int k = 0; k < m; ++k) at += lay.rows[k];
          want.resize(static_cast<size_t>(lay.rows[m]));
          if (Status st = sm.ReadExpertBias(*ck, b.layer, e, m, want.data()); !st.ok()) {
            rep.problems.push_back(st.message());
            continue;
          }
          if (std::memcmp(want.data(), rec.data() + lay.bias_off + 4 * at, want.size() * 4) != 0)
            r = std::max(r, 1.0);
        }
        vl.mean_rel_error += r;
        vl.max_rel_error = std::max(vl.max_rel_error, r);
        ++compared;
      }
    }
    if (compared) vl.mean_rel_error /= compared;
    if (ck) rep.layers.push_back(vl);
    char line[160];
    std::snprintf(line, sizeof line, "%s: %d records checked%s", b.file.c_str(), b.experts,
                  ck ? (", mean relative error " + std::to_string(vl.mean_rel_error)).c_str() : "");
    say(line);
  }
  return rep;
}

}  // namespace waste::convert
