// A MoE layer over a chunk of tokens (MoeLayer and its steps): route every
// token, hint the chunk's distinct experts a window at a time, build the
// gate and up lookup tables once per token, let every pool thread take work
// from one list (records, shared experts), and sum the weighted outputs in
// routing order.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/format/encoding.h"
#include "engine/kernels/int4.h"
#include "engine/kernels/mxfp4.h"
#include "engine/kernels/vq.h"
#include "engine/model/moe.h"
#include "engine/model/norms.h"
#include "engine/model/router.h"

namespace waste {

// The chunk's distinct experts, in ascending id, each with the (token, slot)
// pairs it serves.
struct MoeLayer::Users {
  std::map<int, std::vector<std::pair<int, int>>> of;
  std::vector<int> wanted;  // the keys of `of`, ascending
};

// How the chunk's routed products read their input. gate and up read every
// token's input through the layer's own codebooks, which all its experts
// share: their lookup tables are built once per token (MoeScratch::luts
// and derived_gu). A table is either built straight into byte planes (the
// exact kernel without gathers, where it covers the format), or quantized
// a scale group at a time (the int8 table, when asked for); neither writes
// a whole float table. Otherwise it is kept in floats (the gathers).
struct MoeLayer::Tables {
  Tables(const ExpertQuant& quant, const RecordLayout& layout, kernels::Isa kernels_isa)
      : q(quant), lay(layout), isa(kernels_isa) {}
  const ExpertQuant& q;
  const RecordLayout& lay;
  kernels::Isa isa;
  bool int8 = false, split = false, keep_float = false;
  size_t lut_gu = 0, lut_d = 0;  // float table sizes: gate/up's input, down's
  size_t derived_gu_bytes = 0, derived_down_bytes = 0;
  std::vector<const float*> books;  // [matrix][stage]

  const float* const* codebooks(int matrix) const { return books.data() + matrix * q.stages; }
  // Matrix m's tables for input x ([cols]): the float table into `lut`
  // (keep_float only), the derived one into `derived` (split or int8).
  void Build(int m, const float* x, int64_t cols, float* lut, uint8_t* derived) const {
    if (split)
      kernels::VqBuildSplitLut(codebooks(m), q.stages, q.entries, x, cols, derived, isa);
    else if (int8)
      kernels::VqBuildQLut(codebooks(m), q.stages, q.entries, q.index_bits, x, cols, derived, isa);
    else
      kernels::VqBuildLut(codebooks(m), q.stages, q.entries, x, cols, lut, isa);
  }
  void Apply(const kernels::VqMatrixView& v, const float* lut, const uint8_t* derived, float* y,
             int64_t a, int64_t b) const {
    if (int8)
      kernels::VqApplyQ(v, derived, y, a, b, isa);
    else
      kernels::VqApplySplit(v, lut, split ? derived : nullptr, y, a, b, isa);
  }
  // Matrix m (gate, up, down) of the record at `rec`.
  kernels::VqMatrixView View(const uint8_t* rec, int m) const {
    kernels::VqMatrixView v;
    v.indices = rec + lay.matrix_off[m];
    v.scales = rec + lay.scales_off +
               2 * (m == 0   ? 0
                    : m == 1 ? lay.rows[0]
                             : lay.rows[0] + lay.rows[1]);
    v.rows = lay.rows[m];
    v.cols = lay.cols[m];
    v.stages = q.stages;
    v.entries = q.entries;
    v.index_bits = q.index_bits;
    v.index_block = q.index_block;
    return v;
  }
};

MoeLayer::MoeLayer(const LayerBuild& b, MoeCommon& common)
    : L_(b.layer), c_(b.c), common_(common) {
  const Trunk& t = b.t;
  const std::string m = b.prefix + "block_sparse_moe.";
  router_ = &t.Matrix(m + "gate.weight");
  if (c_.router_bias)
    router_bias_ = {t.Vector(m + "gate.e_score_correction_bias"),
                    static_cast<size_t>(c_.n_experts)};
  if (c_.router_logit_bias) router_logit_bias_ = t.Vector(m + "gate.bias");
  if (c_.latent > 0) {
    latent_down_ = &t.Matrix(m + "routed_expert_down_proj.weight");
    latent_up_ = &t.Matrix(m + "routed_expert_up_proj.weight");
    if (c_.latent_norm) latent_norm_ = t.Vector(m + "routed_expert_norm.weight");
  }
  if (b.plan.shared_expert && c_.shared_expert_gate)
    shared_expert_ = std::make_unique<Mlp>(t, m + "shared_expert.",
                                           &t.Matrix(m + "shared_expert_gate.weight"));
  else if (b.plan.shared_expert)
    shared_expert_ = std::make_unique<Mlp>(t, m + "shared_experts.");
}

ExpertScratch MoeScratch::TakeExpertScratch(size_t inter, size_t lut_floats, size_t derived_bytes) {
  ExpertScratch x;
  {
    std::lock_guard<std::mutex> lock(tables_mu);
    if (!spare_experts.empty()) {
      x = std::move(spare_experts.back());
      spare_experts.pop_back();
    }
  }
  // Grow only: what a smaller layer or chunk does not need stays allocated.
  if (x.g.size() < inter) x.g.resize(inter);
  if (x.u.size() < inter) x.u.resize(inter);
  if (x.lut_down.size() < lut_floats) x.lut_down.resize(lut_floats);
  if (x.derived_down.size() < derived_bytes) x.derived_down.resize(derived_bytes);
  return x;
}

void MoeScratch::GiveBackExpertScratch(ExpertScratch x) {
  std::lock_guard<std::mutex> lock(tables_mu);
  spare_experts.push_back(std::move(x));
}

void MoeLayer::ApplyDirectExpert(LayerContext& ctx, const uint8_t* rec,
                                 std::span<const std::pair<int, int>> who, const float* h,
                                 float* per_slot) {
  const RecordLayout& lay = common_.ct.record_layout();
  const ExpertQuant& q = common_.ct.manifest().quant;
  const int hid = c_.expert_width(), inter = c_.moe_inter, k = c_.top_k;
  const bool mxfp4 = q.fmt == format::Fmt::kMXFP4, int4 = q.fmt == format::Fmt::kINT4;
  // BF16R: the record's matrices, row-major bfloat16; Q4GR: the trunk's Q4G,
  // payloads then every matrix's group scales.
  kernels::MatrixView trunk_like[3];
  kernels::Mxfp4MatrixView fp4[3];  // MXFP4: codes, then every matrix's scales
  kernels::Int4MatrixView i4[3];     // INT4: the same order
  const uint8_t* scales = rec + lay.scales_off;
  for (int m = 0; m < 3; ++m) {
    kernels::MatrixView& w = trunk_like[m];
    if (q.fmt == format::Fmt::kQ4GR) {
      w.fmt = format::Fmt::kQ4G;
      w.group = q.vec_dim;
      w.scales = reinterpret_cast<const uint16_t*>(scales);  // read unaligned (matvec.h)
    } else {
      w.fmt = format::Fmt::kF16;
      w.bf16 = true;
    }
    w.rows = fp4[m].rows = i4[m].rows = lay.rows[m];
    w.cols = fp4[m].cols = i4[m].cols = lay.cols[m];
    w.payload = fp4[m].codes = i4[m].codes = rec + lay.matrix_off[m];
    fp4[m].scales = i4[m].scales = scales;
    scales += lay.rows[m] * (lay.cols[m] / q.vec_dim) * q.scale_bytes_per_vector();
  }
  // Every token routed here in one pass over the record: each block of 32
  // rows is applied to all the tokens while it is in cache, so a prefill
  // chunk reads the record from memory about once. A row is still one
  // product call, so the bits do not depend on the tokens beside it.
  const size_t n = who.size();
  std::vector<float> g(n * inter), u(n * inter);  // [n][moe_inter]
  const auto rows = [&](int m, int64_t count, const float* const* xs, float* const* ys) {
    ctx.pool.ParallelFor(count, 32, [&](int64_t a, int64_t b) {
      if (!mxfp4 && !int4) {
        kernels::MatVecBlocks(trunk_like[m], std::span(xs, n), std::span(ys, n), a, b, 32,
                              ctx.opt.isa, ctx.opt.q4_input);
        return;
      }
      for (int64_t lo = a; lo < b; lo += 32)
        for (size_t i = 0; i < n; ++i) {
          if (int4)
            kernels::Int4MatVec(i4[m], xs[i], ys[i], lo, std::min(b, lo + 32), ctx.opt.isa);
          else
            kernels::Mxfp4MatVec(fp4[m], xs[i], ys[i], lo, std::min(b, lo + 32), ctx.opt.isa);
        }
    });
  };
  std::vector<const float*> xs(n);
  std::vector<float*> gs(n), us(n), dsts(n);
  for (size_t i = 0; i < n; ++i) {
    const auto [t, j] = who[i];
    xs[i] = h + static_cast<size_t>(t) * hid;
    gs[i] = g.data() + i * inter;
    us[i] = u.data() + i * inter;
    dsts[i] = per_slot + (static_cast<size_t>(t) * k + j) * hid;
  }
  rows(0, inter, xs.data(), gs.data());
  rows(1, inter, xs.data(), us.data());
  for (size_t i = 0; i < n; ++i) ExpertActivation(rec, gs[i], us[i]);
  rows(2, hid, gs.data(), dsts.data());
  for (size_t i = 0; i < n; ++i) AddExpertBias(rec, 2, dsts[i]);
}

void MoeLayer::AddExpertBias(const uint8_t* rec, int m, float* y) const {
  const RecordLayout& lay = common_.ct.record_layout();
  if (lay.bias_off == 0) return;
  int64_t at = 0;
  for (int i = 0; i < m; ++i) at += lay.rows[i];
  const uint8_t* b = rec + lay.bias_off + 4 * at;  // not necessarily 4-aligned
  for (int64_t r = 0; r < lay.rows[m]; ++r) {
    float v;
    std::memcpy(&v, b + 4 * r, 4);
    y[r] += v;
  }
}

void MoeLayer::ExpertActivation(const uint8_t* rec, float* g, float* u) const {
  AddExpertBias(rec, 0, g);
  AddExpertBias(rec, 1, u);
  const int n = c_.moe_inter;
  if (c_.swiglu_limit > 0.f) {  // GPT-OSS: clamped, and the linear half plus one
    const float limit = c_.swiglu_limit, alpha = c_.swiglu_alpha;
    for (int i = 0; i < n; ++i) {
      const float gi = std::min(g[i], limit);
      const float ui = std::clamp(u[i], -limit, limit);
      g[i] = (ui + 1.f) * (gi * Sigmoid(gi * alpha));
    }
    return;
  }
  if (c_.situ) {
    for (int i = 0; i < n; ++i) g[i] = Situ(g[i], u[i], c_.situ_beta, c_.situ_linear_beta);
    return;
  }
  for (int i = 0; i < n; ++i) g[i] = Silu(g[i]) * u[i];
}

Status MoeLayer::Run(LayerContext& ctx, Lookahead& lookahead, std::span<const int> positions,
                     const float* h, float* out, int ahead) {
  const int L = L_;
  const int T = static_cast<int>(positions.size());
  std::vector<Routing> route(T);
  ctx.charge = StepPart::kRouter;
  RouteChunk(ctx, positions, h, route);
  Users users;
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < route[t].count; ++j) users.of[route[t].expert[j]].push_back({t, j});
  for (const auto& [e, _] : users.of) users.wanted.push_back(e);
  // Ask for the first `window` now and one more as each is taken (RunExperts):
  // a chunk can want more experts than the cache holds, and hinting them all
  // would evict records read for this very chunk before they are used.
  const size_t window =
      std::min(static_cast<size_t>(std::max(1, ctx.opt.prefetch)), users.wanted.size());
  common_.experts->Hint(L, std::span<const int>(users.wanted).first(window), HintKind::kDemand);
  // The next MoE layer's guess goes out after this layer's first demands, so
  // that idle readers start on what is needed now.
  lookahead.Score(L, users.wanted);
  if (ahead >= 0) lookahead.Hint(ahead);

  const auto te = Clock::now();
  // K3's latent MoE: the routed experts read the latent down-projection of h.
  const float* xin = h;
  ctx.charge = StepPart::kLatentProducts;  // also SumExperts' up-projection
  if (latent_down_) {
    const size_t lat = static_cast<size_t>(c_.latent);
    common_.scratch.latent_in.resize(std::max(common_.scratch.latent_in.size(), T * lat));
    const size_t n = static_cast<size_t>(T);
    ctx.MatVecMany(*latent_down_, RowPointers(h, n, static_cast<size_t>(c_.hidden)),
                   RowPointers(common_.scratch.latent_in.data(), n, lat));
    xin = common_.scratch.latent_in.data();
  }
  const auto tt = Clock::now();
  const Tables tables = PlanTables(ctx, T);
  BuildGateUpTables(ctx, T, xin, tables);
  ctx.Charge(StepPart::kGateUpTables, Since(tt), 0);
  double wait = 0;
  ctx.charge = StepPart::kSharedExperts;
  const Status run = RunExperts(ctx, T, h, xin, tables, users, window, &wait);
  ctx.charge = StepPart::kLatentProducts;
  WASTE_RETURN_IF_ERROR(run);
  ctx.times.expert_wait += wait;
  ctx.times.experts += Since(te) - wait;
  SumExperts(ctx, T, route, out);
  return Status::Ok();
}

void MoeLayer::RouteChunk(LayerContext& ctx, std::span<const int> positions, const float* h,
                          std::span<Routing> route) {
  const int L = L_;
  const int T = static_cast<int>(positions.size());
  const size_t E = static_cast<size_t>(c_.n_experts);
  std::vector<float> logits(T * E);  // [T][n_experts]
  RouterLogits(ctx, T, h, logits.data());
  for (int t = 0; t < T; ++t) {
    Route(common_.route, std::span<const float>(logits).subspan(t * E, E), router_bias_,
          &route[t]);
    if (ctx.opt.on_route)
      ctx.opt.on_route(positions[t], L, {route[t].expert, static_cast<size_t>(route[t].count)});
  }
}

void MoeLayer::RouterLogits(LayerContext& ctx, int T, const float* h, float* logits) const {
  const size_t n = static_cast<size_t>(T), E = static_cast<size_t>(c_.n_experts);
  ctx.MatVecMany(*router_, RowPointers(h, n, static_cast<size_t>(c_.hidden)),
                 RowPointers(logits, n, E));
  if (router_logit_bias_)
    for (size_t t = 0; t < n; ++t)
      for (size_t e = 0; e < E; ++e) logits[t * E + e] += router_logit_bias_[e];
}

MoeLayer::Tables MoeLayer::PlanTables(LayerContext& ctx, int T) {
  const int L = L_;
  const int hid = c_.expert_width(), inter = c_.moe_inter;
  Tables tb(common_.ct.manifest().quant, common_.ct.record_layout(), ctx.opt.isa);
  const ExpertQuant& q = tb.q;
  const int base = common_.ct.manifest().Bank(L)->codebook_base;
  tb.books.resize(static_cast<size_t>(3 * q.stages));
  for (int i = 0; i < 3 * q.stages; ++i) tb.books[i] = common_.ct.Codebook(base + i).data();
  tb.int8 = ctx.opt.expert_table == kernels::VqTable::kI8;
  tb.split = !tb.int8 && kernels::VqSplitCovers(q.index_bits, q.index_block, ctx.opt.isa);
  tb.keep_float = !tb.int8 && !tb.split;
  // The split planes and the int8 table are built without a float table.
  tb.lut_gu = tb.keep_float ? kernels::VqLutFloats(hid, q.stages, q.entries) : 0;
  tb.lut_d = tb.keep_float ? kernels::VqLutFloats(inter, q.stages, q.entries) : 0;
  tb.derived_gu_bytes = tb.int8    ? kernels::VqQLutBytes(hid, q.stages, q.index_bits)
                        : tb.split ? kernels::VqSplitLutBytes(hid, q.stages)
                                   : 0;
  tb.derived_down_bytes = tb.int8    ? kernels::VqQLutBytes(inter, q.stages, q.index_bits)
                          : tb.split ? kernels::VqSplitLutBytes(inter, q.stages)
                                     : 0;
  // The buffers only grow (resize keeps what was there; every byte read
  // below is first written for this chunk).
  std::vector<uint8_t>& derived_gu = common_.scratch.derived_gu;
  derived_gu.resize(std::max(derived_gu.size(), static_cast<size_t>(T) * 2 * tb.derived_gu_bytes));
  std::vector<float>& luts = common_.scratch.luts;
  luts.resize(std::max(luts.size(), static_cast<size_t>(T) * 2 * tb.lut_gu));
  return tb;
}

void MoeLayer::BuildGateUpTables(LayerContext& ctx, int T, const float* h, const Tables& tb) {
  const int hid = c_.expert_width();
  const ExpertQuant& q = tb.q;
  MoeScratch& s = common_.scratch;
  // Every token's gate and up tables are independent, so the pool builds
  // them (each wholly one thread's: the split cannot change a bit).
  ctx.pool.ParallelFor(q.direct() ? 0 : 2 * T, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / 2;
      tb.Build(static_cast<int>(i % 2), h + t * hid, hid, s.luts.data() + i * tb.lut_gu,
               s.derived_gu.data() + i * tb.derived_gu_bytes);
    }
  });
}

double MoeLayer::ApplyVqExpert(const Tables& tb, const uint8_t* rec,
                               std::span<const std::pair<int, int>> who, ExpertScratch& x) {
  const int k = c_.top_k, hid = c_.expert_width(), inter = c_.moe_inter;
  const kernels::VqMatrixView vg = tb.View(rec, 0), vu = tb.View(rec, 1), vd = tb.View(rec, 2);
  const MoeScratch& s = common_.scratch;
  double down_tables = 0;
  for (const auto& [t, j] : who) {
    const float* lg = tb.keep_float ? s.luts.data() + (2 * t) * tb.lut_gu : nullptr;
    const float* lu = tb.keep_float ? s.luts.data() + (2 * t + 1) * tb.lut_gu : nullptr;
    const uint8_t* qg = s.derived_gu.data() + (2 * t) * tb.derived_gu_bytes;
    const uint8_t* qu = s.derived_gu.data() + (2 * t + 1) * tb.derived_gu_bytes;
    tb.Apply(vg, lg, qg, x.g.data(), 0, inter);
    tb.Apply(vu, lu, qu, x.u.data(), 0, inter);
    ExpertActivation(rec, x.g.data(), x.u.data());
    const auto tt = Clock::now();
    tb.Build(2, x.g.data(), inter, x.lut_down.data(), x.derived_down.data());
    down_tables += Since(tt);
    float* dst = common_.scratch.per_slot.data() + (static_cast<size_t>(t) * k + j) * hid;
    tb.Apply(vd, x.lut_down.data(), x.derived_down.data(), dst, 0, hid);
    AddExpertBias(rec, 2, dst);
  }
  return down_tables;
}

Status MoeLayer::RunExperts(LayerContext& ctx, int T, const float* h, const float* xin,
                            const Tables& tb, const Users& users, size_t hinted,
                            double* wait_seconds) {
  const int L = L_;
  const int k = c_.top_k, hid = c_.hidden, inter = c_.moe_inter, ew = c_.expert_width();
  // [t][j][expert width]: slot j of token t is written whole by its expert
  // before it is read, and slots past a token's route count are never read.
  std::vector<float>& per_slot = common_.scratch.per_slot;
  per_slot.resize(std::max(per_slot.size(), static_cast<size_t>(T) * k * ew));
  // [T][hidden]: each token's shared-expert output, when the layer has one.
  const int shared_tokens = shared_expert_ ? T : 0;
  std::vector<float>& shared_out = common_.scratch.shared_out;
  shared_out.resize(std::max(shared_out.size(), static_cast<size_t>(shared_tokens) * hid));

  // The work list every thread of the pool takes from, one piece at a time:
  // a whole expert (computed alone over all its rows: no barrier per matrix,
  // and SiLU and down's table are no serial step that leaves the other
  // threads idle) or the shared expert of up to kSharedBatch tokens
  // (weights in the trunk, read once for the batch; 16 fill an AMX tile).
  constexpr int kSharedBatch = 16;
  struct Work {
    std::mutex mu;
    std::vector<int> pending;  // ascending ids, not yet taken
    size_t next_hint = 0;      // of users.wanted: the next demand hint to send
    int shared_next = 0;       // tokens whose shared expert is taken (in batches)
    double wait = 0;           // blocked in Acquire, summed over the threads
    Status error = Status::Ok();
  } work;
  work.pending = users.wanted;
  work.next_hint = hinted;
  struct Task {
    enum { kDone, kRecord, kAcquire, kShared } kind = kDone;
    int id = -1;                   // expert, or kShared's first token
    const uint8_t* rec = nullptr;  // kRecord: pinned already
  };
  // Under work.mu: takes `pending[i]` and lets one more demand hint out, so
  // that the window of records asked for ahead moves on.
  const auto take = [&](size_t i) {
    const int e = work.pending[i];
    work.pending.erase(work.pending.begin() + static_cast<std::ptrdiff_t>(i));
    if (work.next_hint < users.wanted.size())
      common_.experts->Hint(L, std::span<const int>(&users.wanted[work.next_hint++], 1),
                     HintKind::kDemand);
    return e;
  };
  // The next piece: a record the source says is ready (taken first, so that
  // a late read overlaps the others' arithmetic; pinned at once when it
  // still is), else a shared expert (filling what would be a wait), else the
  // first record still missing, to wait for.
  const auto next = [&]() -> Task {
    std::lock_guard<std::mutex> lock(work.mu);
    if (!work.error.ok()) return {};
    for (size_t i = 0; i < work.pending.size(); ++i) {
      if (!common_.experts->Ready(L, work.pending[i])) continue;
      auto r = common_.experts->TryAcquire(L, work.pending[i]);
      if (!r.ok()) {
        work.error = r.status();
        return {};
      }
      // Pinned now; else the answer was already stale, and the record is
      // still the one to take (Acquire brings it back).
      if (*r) return {Task::kRecord, take(i), *r};
      return {Task::kAcquire, take(i)};
    }
    if (work.shared_next < shared_tokens) {
      const int first = work.shared_next;
      work.shared_next = std::min(shared_tokens, first + kSharedBatch);
      return {Task::kShared, first};
    }
    if (!work.pending.empty()) return {Task::kAcquire, take(0)};
    return {};
  };
  // One thread's share: pieces until none is left. Each expert writes its own
  // per-slot outputs, summed in routing order by SumExperts, and a row's
  // arithmetic does not depend on the thread or range that computes it, so
  // neither order nor thread changes a bit.
  const uint64_t record_bytes = common_.ct.record_layout().payload_end;
  const auto worker = [&](ExpertScratch& x) {
    double routed = 0, down_tables = 0;  // this thread's, for the roofline
    uint64_t routed_bytes = 0;
    struct ChargeAtEnd {  // even when the worker returns early
      LayerContext& m;
      double &routed, &down_tables;
      uint64_t& routed_bytes;
      ~ChargeAtEnd() {
        m.Charge(StepPart::kRoutedExperts, routed, routed_bytes);
        m.Charge(StepPart::kDownTables, down_tables, 0);
      }
    } charge_at_end{ctx, routed, down_tables, routed_bytes};
    for (Task task = next(); task.kind != Task::kDone; task = next()) {
      if (task.kind == Task::kShared) {  // the Mlp's ParallelFors run on this thread
        const size_t n = static_cast<size_t>(std::min(kSharedBatch, shared_tokens - task.id));
        const size_t first = static_cast<size_t>(task.id) * hid;
        shared_expert_->Run(ctx, RowPointers(h + first, n, static_cast<size_t>(hid)),
                            RowPointers(shared_out.data() + first, n, static_cast<size_t>(hid)));
        continue;
      }
      if (task.kind == Task::kAcquire) {
        const auto tw = Clock::now();
        auto rec = common_.experts->Acquire(L, task.id);  // sleeps until the record is in
        std::lock_guard<std::mutex> lock(work.mu);
        work.wait += Since(tw);
        if (!rec.ok()) {
          if (work.error.ok()) work.error = rec.status();
          return;
        }
        task.rec = *rec;
      }
      const std::vector<std::pair<int, int>>& who = users.of.at(task.id);
      const auto ta = Clock::now();
      if (tb.q.direct()) {
        ApplyDirectExpert(ctx, task.rec, who, xin,
                          per_slot.data());  // its ParallelFor runs on this thread
      } else {
        down_tables += ApplyVqExpert(tb, task.rec, who, x);
      }
      routed += Since(ta);
      routed_bytes += record_bytes * who.size();
      common_.experts->Release(L, task.id);
    }
  };
  // A thread holds one pin at a time, so no more threads than the source
  // can pin at once (a one-slot cache computes on one thread).
  const int workers =
      static_cast<int>(std::min<uint64_t>(ctx.pool.size(), common_.experts->PinLimit()));
  ctx.pool.ParallelFor(workers, 1, [&](int64_t, int64_t) {
    ExpertScratch x = common_.scratch.TakeExpertScratch(inter, tb.lut_d, tb.derived_down_bytes);
    struct GiveBack {  // even if a kernel throws
      MoeScratch& m;
      ExpertScratch& x;
      ~GiveBack() { m.GiveBackExpertScratch(std::move(x)); }
    } give_back{common_.scratch, x};
    worker(x);
  });
  // Waiting is the threads' blocked time averaged over them, so that it and
  // the arithmetic add up to the time this section took.
  *wait_seconds = work.wait / workers;
  return work.error;
}

void MoeLayer::SumExperts(LayerContext& ctx, int T, std::span<const Routing> route, float* out) {
  const int k = c_.top_k, hid = c_.hidden, ew = c_.expert_width();
  const size_t n = static_cast<size_t>(T), w = static_cast<size_t>(ew);
  // [T][expert width]: with a latent, each token's weighted sum before its
  // norm and up-projection.
  std::vector<float> lat(latent_up_ ? n * w : 0), normed(latent_norm_ ? n * w : 0);
  // Per token, in routing order: the weighted experts.
  for (size_t t = 0; t < n; ++t) {
    float* sum = latent_up_ ? lat.data() + t * w : out + t * hid;
    std::fill(sum, sum + ew, 0.f);
    for (int j = 0; j < route[t].count; ++j) {
      const float wt = route[t].weight[j];
      const float* src = common_.scratch.per_slot.data() + (t * k + j) * w;
      for (int i = 0; i < ew; ++i) sum[i] += wt * src[i];
    }
    if (latent_norm_)  // K3: RMSNorm (latent_moe_use_norm)
      RmsNorm(sum, latent_norm_, ew, c_.rms_eps, normed.data() + t * w);
  }
  if (latent_up_)  // K3: back to the hidden width, the matrix read once for the chunk
    ctx.MatVecMany(*latent_up_,
                   RowPointers<const float>(latent_norm_ ? normed.data() : lat.data(), n, w),
                   RowPointers(out, n, static_cast<size_t>(hid)));
  // Then the shared expert.
  if (shared_expert_)
    for (size_t t = 0; t < n; ++t) {
      float* o = out + t * hid;
      const float* s = common_.scratch.shared_out.data() + t * hid;
      for (int i = 0; i < hid; ++i) o[i] += s[i];
    }
}

}  // namespace waste
