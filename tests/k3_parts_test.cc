// Kimi K3's new formulas (SiTU, KDA's bounded decay, Attention Residuals)
// against values an independent Python transcription of the published
// equations computed in float64 (tools/k3_parts/make_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/model/attn_res.h"
#include "engine/model/norms.h"

namespace waste {
namespace {

using nlohmann::json;

json Fixture() {
  std::ifstream f(std::string(WASTE_FIXTURES) + "/k3_parts/parts.json");
  return json::parse(f);
}

std::vector<float> Floats(const json& j) { return j.get<std::vector<float>>(); }

// |got - want| within rel of the largest |want|, and a little absolute room.
void ExpectClose(const std::vector<float>& got, const json& want, double rel) {
  const std::vector<double> w = want.get<std::vector<double>>();
  ASSERT_EQ(got.size(), w.size());
  double scale = 0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_NEAR(got[i], w[i], rel * scale + 1e-7) << "element " << i;
}

TEST(K3PartsTest, SituMatchesTheReference) {
  const json fx = Fixture();
  ASSERT_EQ(fx["situ"].size(), 3u);
  for (const json& c : fx["situ"]) {
    const float beta = c["beta"], lbeta = c["linear_beta"];
    const std::vector<float> g = Floats(c["g"]), u = Floats(c["u"]);
    std::vector<float> out(g.size());
    for (size_t i = 0; i < g.size(); ++i) out[i] = Situ(g[i], u[i], beta, lbeta);
    ExpectClose(out, c["out"], 2e-6);
  }
}

TEST(K3PartsTest, SituIsNotSiluTimesUp) {
  // The up half is squashed too: with linear_beta 25, u = 100 gives < 25.
  EXPECT_LT(Situ(10.f, 100.f, 4.f, 25.f), 4.f * 25.f);
  EXPECT_GT(Silu(10.f) * 100.f, 900.f);
}

TEST(K3PartsTest, BoundedDecayMatchesTheReferenceAndDiffersFromKimiLinears) {
  const json d = Fixture()["decay"];
  const int H = d["heads"], D = d["head_dim"];
  const float lb = d["lower_bound"];
  const std::vector<float> a_log = Floats(d["a_log"]), z = Floats(d["z"]);
  std::vector<float> bounded(H * D), linear(H * D);
  for (int h = 0; h < H; ++h) {
    const float a = std::exp(a_log[h]);  // one per head
    for (int i = 0; i < D; ++i) {
      bounded[h * D + i] = KdaLogDecay(a, z[h * D + i], lb);
      linear[h * D + i] = KdaLogDecay(a, z[h * D + i], 0.f);
    }
  }
  ExpectClose(bounded, d["bounded"], 1e-6);
  ExpectClose(linear, d["kimi_linear"], 2e-6);
  double differ = 0;
  for (int i = 0; i < H * D; ++i) {
    EXPECT_GE(bounded[i], lb);  // float32 sigmoid saturates to 1 at large a * z
    EXPECT_LE(bounded[i], 0.f);
    differ = std::max(differ, double(std::abs(bounded[i] - linear[i])));
  }
  EXPECT_GT(differ, 1.0);  // two functions, not one clamped
}

TEST(K3PartsTest, AttnResMatchesTheReferenceAlsoInPlace) {
  const json fx = Fixture();
  ASSERT_EQ(fx["attn_res"].size(), 3u);
  for (const json& c : fx["attn_res"]) {
    const int nb = c["blocks"], n = c["width"];
    const float eps = c["eps"];
    const std::vector<float> blocks = Floats(c["block_values"]), partial = Floats(c["partial"]),
                             nw = Floats(c["norm_w"]), pw = Floats(c["proj_w"]);
    std::vector<float> out(n);
    AttnRes(blocks.data(), nb, partial.data(), nw.data(), pw.data(), n, eps, out.data());
    ExpectClose(out, c["out"], 2e-6);
    // The output aggregation passes the partial sum as the output too.
    std::vector<float> in_place = partial;
    AttnRes(blocks.data(), nb, in_place.data(), nw.data(), pw.data(), n, eps, in_place.data());
    EXPECT_EQ(in_place, out);
  }
}

}  // namespace
}  // namespace waste
