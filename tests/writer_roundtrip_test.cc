// The writer and the reader agree: every trunk format, every expert format,
// the blocked index layout, codebooks and scales come back as written; a
// container is published only when it is finished.
#include "engine/format/writer.h"

#include <gtest/gtest.h>

#include <random>

#include "engine/format/encoding.h"
#include "engine/synth/synth.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using format::Fmt;
using nlohmann::json;

json SmallConfig() {
  json j = SynthPreset("tiny-kimi")->config;
  j["hidden_size"] = 64;            // one index block of rows for down
  j["moe_intermediate_size"] = 72;  // not a multiple of the 64-row block: padding rows
  j["num_experts"] = 3;
  j["num_experts_per_token"] = 2;
  j["intermediate_size"] = 96;
  return j;
}

struct Written {
  std::vector<std::vector<float>> tensors;
  std::vector<std::vector<float>> books;  // by MoE layer
  // [layer][expert][matrix] stage-major indices and f16 scales
  std::vector<std::vector<std::array<std::vector<uint8_t>, 3>>> idx;
  std::vector<std::vector<std::array<std::vector<uint16_t>, 3>>> scales;
};

Fmt TensorFmt(size_t i, const TensorSpec& s) {
  if (s.storage == Storage::kF32) return Fmt::kF32;
  static const Fmt kCycle[] = {Fmt::kQ4G, Fmt::kQ8G, Fmt::kQ3G, Fmt::kF16, Fmt::kF32};
  return kCycle[i % 5];
}

Written WriteAll(const std::string& dir, Fmt expert_fmt) {
  auto w = ContainerWriter::Create(dir, SmallConfig(), expert_fmt, false, /*jobs=*/2);
  EXPECT_TRUE(w.ok()) << w.status().message();
  ContainerWriter& cw = **w;
  const ModelConfig& c = cw.config();
  const ExpertQuant& q = cw.quant();
  const RecordLayout& lay = cw.record_layout();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Written out;
  const auto specs = TrunkSpec(c);
  for (size_t i = 0; i < specs.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : specs[i].shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    // Every other F16 tensor is bfloat16.
    EXPECT_TRUE(
        cw.AddTensor(specs[i].name, specs[i].shape, v, TensorFmt(i, specs[i]), i % 10 == 3).ok());
    out.tensors.push_back(std::move(v));
  }
  out.idx.resize(c.n_layers);
  out.scales.resize(c.n_layers);
  out.books.resize(c.n_layers);
  for (int L = 0; L < c.n_layers; ++L) {
    if (!c.is_moe_layer(L)) continue;
    std::vector<float> books(static_cast<size_t>(3 * q.stages * q.entries * q.vec_dim));
    for (float& x : books) x = u(rng);
    EXPECT_TRUE(cw.AddCodebooks(L, books).ok());
    out.books[L] = books;
    out.idx[L].resize(c.n_experts);
    out.scales[L].resize(c.n_experts);
    for (int e = 0; e < c.n_experts; ++e) {
      for (int m = 0; m < 3; ++m) {
        auto& ix = out.idx[L][e][m];
        ix.resize(static_cast<size_t>(q.stages * lay.rows[m] * lay.cols[m] / 8));
        for (auto& b : ix) b = static_cast<uint8_t>(rng() % q.entries);
        auto& sc = out.scales[L][e][m];
        sc.resize(static_cast<size_t>(lay.rows[m]));
        for (auto& s : sc) s = format::F32ToF16(u(rng));
      }
    }
    const auto& idx = out.idx[L];
    const auto& scales = out.scales[L];
    EXPECT_TRUE(cw.WriteBank(L, [&](int e, std::span<uint8_t> rec) {
                    EncodeRecordPayload(lay, q, {idx[e][0], idx[e][1], idx[e][2]},
                                        {scales[e][0], scales[e][1], scales[e][2]}, rec);
                  }).ok());
  }
  const Status st = cw.Finish();
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

class RoundTrip : public ::testing::TestWithParam<Fmt> {};

TEST_P(RoundTrip, EverythingComesBackAsWritten) {
  const std::string dir = waste::testing::ScratchDir();
  const Written w = WriteAll(dir, GetParam());
  auto ct = Container::Open(dir);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  const ModelConfig& c = ct->config();
  const ExpertQuant& q = ct->manifest().quant;
  const RecordLayout& lay = ct->record_layout();
  EXPECT_EQ(q.fmt, GetParam());

  // Trunk: F32 exact, halves as rounded, grouped formats as our own quantizer decodes.
  const auto specs = TrunkSpec(c);
  for (size_t i = 0; i < specs.size(); ++i) {
    const TrunkTensor* t = ct->manifest().FindTensor(specs[i].name);
    ASSERT_NE(t, nullptr) << specs[i].name;
    EXPECT_EQ(t->fmt, TensorFmt(i, specs[i]));
    std::vector<uint8_t> payload, scales;
    ASSERT_TRUE(ct->ReadTensor(*t, &payload, &scales).ok());
    const std::vector<float>& want = w.tensors[i];
    const int64_t cols = t->shape.back(), rows = t->elements / cols;
    if (t->fmt == Fmt::kF32) {
      EXPECT_EQ(0, std::memcmp(payload.data(), want.data(), want.size() * 4)) << t->name;
    } else if (t->fmt == Fmt::kF16) {
      EXPECT_EQ(t->bf16, i % 10 == 3);
      for (size_t k = 0; k < want.size(); ++k) {
        uint16_t h;
        std::memcpy(&h, payload.data() + 2 * k, 2);
        const float got = t->bf16 ? format::Bf16ToF32(h) : format::F16ToF32(h);
        const float expect = t->bf16 ? format::Bf16ToF32(format::F32ToBf16(want[k]))
                                     : format::F16ToF32(format::F32ToF16(want[k]));
        ASSERT_EQ(got, expect) << t->name << "[" << k << "]";
      }
    } else {
      const int bits = t->fmt == Fmt::kQ8G ? 8 : t->fmt == Fmt::kQ4G ? 4 : 3;
      const format::GroupedShape g{bits, t->group, rows, cols};
      std::vector<uint8_t> p2(static_cast<size_t>(g.payload_bytes()));
      std::vector<uint16_t> s2(static_cast<size_t>(rows * g.groups_per_row()));
      format::QuantizeGrouped(g, want.data(), p2.data(), s2.data());
      EXPECT_EQ(payload, p2) << t->name;
      EXPECT_EQ(0, std::memcmp(scales.data(), s2.data(), scales.size())) << t->name;
    }
  }

  // Codebooks, then every record: header, blocked indices, scales.
  std::vector<uint8_t> rec(ct->record_bytes());
  for (const ExpertBank& b : ct->manifest().banks) {
    const size_t per = static_cast<size_t>(q.entries) * q.vec_dim;
    for (int k = 0; k < 3 * q.stages; ++k) {
      auto book = ct->Codebook(b.codebook_base + k);
      ASSERT_EQ(book.size(), per);
      for (size_t i = 0; i < per; ++i)
        ASSERT_EQ(book[i], format::F16ToF32(format::F32ToF16(w.books[b.layer][k * per + i])));
    }
    for (int e = 0; e < c.n_experts; ++e) {
      const Status st = ct->ReadRecord(b.layer, e, rec.data(), /*verify_crc=*/true);
      ASSERT_TRUE(st.ok()) << st.message();
      for (int m = 0; m < 3; ++m) {
        const int64_t rows = lay.rows[m], nvec = lay.cols[m] / 8;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t v = 0; v < nvec; ++v) {
            // The format's blocked layout: [row_block][vector][row_in_block][stage bytes].
            const int64_t pos = (r / 64 * nvec + v) * 64 + r % 64;
            const uint8_t* p = rec.data() + lay.matrix_off[m] + pos * q.bytes_per_vector();
            uint8_t got[4];
            if (q.index_bits == 6)
              format::UnpackVq4(p, got);
            else
              std::memcpy(got, p, q.stages);
            for (int s = 0; s < q.stages; ++s)
              ASSERT_EQ(got[s], w.idx[b.layer][e][m][s * rows * nvec + r * nvec + v])
                  << "layer " << b.layer << " expert " << e << " matrix " << m;
          }
        }
      }
      const uint8_t* sc = rec.data() + lay.scales_off;
      for (int m = 0; m < 3; ++m) {
        EXPECT_EQ(0, std::memcmp(sc, w.scales[b.layer][e][m].data(), lay.rows[m] * 2));
        sc += lay.rows[m] * 2;
      }
      // Padding rows of the last index block and the tail of the record are zero.
      EXPECT_TRUE(
          std::all_of(rec.begin() + lay.payload_end, rec.end(), [](uint8_t x) { return x == 0; }));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ExpertFormats, RoundTrip,
                         ::testing::Values(Fmt::kVQ3R, Fmt::kVQ2R, Fmt::kVQ4P),
                         [](const auto& p) { return std::string(format::FmtName(p.param)); });

TEST(Writer, AnUnfinishedContainerDoesNotOpen) {
  const std::string dir = waste::testing::ScratchDir();
  {
    auto w = ContainerWriter::Create(dir, SmallConfig(), Fmt::kVQ3R, false);
    ASSERT_TRUE(w.ok());
    const Status st = (*w)->Finish();  // no banks yet
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("has no expert bank"), std::string::npos) << st.message();
  }
  auto ct = Container::Open(dir);
  ASSERT_FALSE(ct.ok());
  EXPECT_NE(ct.status().message().find("manifest.json"), std::string::npos);
}

TEST(Writer, RefusesToOverwriteAContainerUnlessAsked) {
  const std::string dir = waste::testing::ScratchDir();
  WriteAll(dir, Fmt::kVQ3R);
  auto again = ContainerWriter::Create(dir, SmallConfig(), Fmt::kVQ3R, false);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already holds a container"), std::string::npos);
  // With overwrite, the old manifest goes first: the directory stops being a
  // container until the new one is finished.
  auto w = ContainerWriter::Create(dir, SmallConfig(), Fmt::kVQ3R, true);
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(Container::Open(dir).ok());
}

}  // namespace
}  // namespace waste
