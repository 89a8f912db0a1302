#include "engine/model/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "engine/format/encoding.h"
#include "engine/kernels/vq.h"
#include "engine/model/layer.h"
#include "engine/model/norms.h"
#include "engine/model/router.h"

namespace waste {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// What Model::Load refuses whatever the trunk.
Status CheckLoad(const Container& ct, ExpertSource* experts, const ModelOptions& opt) {
  const ModelConfig& c = ct.config();
  if (c.tie_embeddings) return Status::Error("tie_word_embeddings is not implemented");
  if (opt.chunk < 1) return Status::Error("chunk must be at least 1");
  if (opt.lookahead < 0) return Status::Error("lookahead must be at least 0");
  if (c.n_moe_layers() > 0 && !experts) return Status::Error("a MoE model needs an expert source");
  return Status::Ok();
}

}  // namespace

Model::Model(const Container& ct, ExpertSource* experts, const ModelOptions& opt)
    : ct_(ct),
      c_(ct.config()),
      experts_(experts),
      opt_(opt),
      pool_(opt.threads > 0 ? opt.threads : kernels::DefaultThreads()),
      guess_config_(c_) {
  // The lookahead ranks experts as Route does, for more of them than top_k;
  // with grouped top-k only the experts of the kept groups can be chosen.
  int eligible = c_.n_experts;
  if (c_.n_group > 1 && c_.topk_group < c_.n_group)
    eligible = c_.topk_group * (c_.n_experts / c_.n_group);
  guess_config_.top_k = std::min({opt.lookahead, eligible, 64});  // Routing holds 64
  guess_.resize(c_.n_layers);
}

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::Load(const Container& ct, ExpertSource* experts,
                                           const ModelOptions& opt) {
  // Refuse what is cheap to refuse before reading the trunk.
  WASTE_RETURN_IF_ERROR(CheckLoad(ct, experts, opt));
  auto trunk = Trunk::Load(ct);
  if (!trunk.ok()) return trunk.status();
  return Load(ct, experts, opt, std::move(*trunk));
}

Result<std::unique_ptr<Model>> Model::Load(const Container& ct, ExpertSource* experts,
                                           const ModelOptions& opt, std::unique_ptr<Trunk> trunk) {
  WASTE_RETURN_IF_ERROR(CheckLoad(ct, experts, opt));
  if (!trunk) return Status::Error("no trunk");
  if (&trunk->container() != &ct)
    return Status::Error("the trunk was built over another container than the model's");
  std::unique_ptr<Model> m(new Model(ct, experts, opt));
  m->trunk_ = std::move(trunk);
  WASTE_RETURN_IF_ERROR(m->Resolve());
  return m;
}

Status Model::Resolve() {
  const Trunk& t = *trunk_;
  auto plans = PlanLayers(c_);
  if (!plans.ok()) return plans.status();
  for (int L = 0; L < c_.n_layers; ++L) {
    auto l = std::make_unique<Layer>();
    const std::string p = "model.layers." + std::to_string(L) + ".";
    const std::string a = p + "self_attn.";
    l->plan = (*plans)[L];
    l->in_norm = t.Vector(p + "input_layernorm.weight");
    l->post_norm = t.Vector(p + "post_attention_layernorm.weight");
    switch (l->plan.attention) {
      case LayerKind::kKda:
        l->kda = ResolveKda(t, a);
        break;
      case LayerKind::kMla:
        l->mla = ResolveMla(t, c_, a);
        break;
    }
    auto set_mlp = [&](const MlpWeights& w) { l->gate = w.gate, l->up = w.up, l->down = w.down; };
    switch (l->plan.ffn) {
      case FfnKind::kDense:
        set_mlp(ResolveMlp(t, p + "mlp."));
        break;
      case FfnKind::kMoe: {
        const std::string m = p + "block_sparse_moe.";
        l->router = &t.Matrix(m + "gate.weight");
        l->router_bias = t.Vector(m + "gate.e_score_correction_bias");
        if (l->plan.shared_expert) set_mlp(ResolveMlp(t, m + "shared_experts."));
        break;
      }
    }
    if (l->plan.ffn == FfnKind::kMoe && first_moe_ < 0) first_moe_ = L;
    layers_.push_back(std::move(l));
  }
  lm_head_ = &t.Matrix("lm_head.weight");
  final_norm_ = t.Vector("model.norm.weight");

  rotary_ = MlaRotary(c_);
  softmax_scale_ = MlaSoftmaxScale(c_, rotary_);
  return Status::Ok();
}

void Model::MatVec(const kernels::MatrixView& w, const float* x, float* y) {
  MatVecs({{&w, x, y}});
}

void Model::MatVecs(std::initializer_list<kernels::MatVecJob> jobs) {
  kernels::MatVecs(pool_, {jobs.begin(), jobs.size()}, 32, opt_.isa);
}

void Model::ApplyBf16Expert(const uint8_t* rec, std::span<const std::pair<int, int>> who,
                            const float* h, float* per_slot) {
  const RecordLayout& lay = ct_.record_layout();
  const int hid = c_.hidden, inter = c_.moe_inter, k = c_.top_k;
  auto view = [&](int m) {  // the record's matrix m, row-major bfloat16
    kernels::MatrixView v;
    v.fmt = format::Fmt::kF16;
    v.bf16 = true;
    v.rows = lay.rows[m];
    v.cols = lay.cols[m];
    v.payload = rec + lay.matrix_off[m];
    return v;
  };
  const kernels::MatrixView vg = view(0), vu = view(1), vd = view(2);
  std::vector<float> g(inter), u(inter);  // [moe_inter]
  for (const auto& [t, j] : who) {
    const float* x = h + static_cast<size_t>(t) * hid;
    pool_.ParallelFor(inter, 32, [&](int64_t a, int64_t b) {
      kernels::MatVec(vg, x, g.data(), a, b, opt_.isa);
      kernels::MatVec(vu, x, u.data(), a, b, opt_.isa);
    });
    for (int i = 0; i < inter; ++i) g[i] = Silu(g[i]) * u[i];
    float* dst = per_slot + (static_cast<size_t>(t) * k + j) * hid;
    pool_.ParallelFor(hid, 32, [&](int64_t a, int64_t b) {
      kernels::MatVec(vd, g.data(), dst, a, b, opt_.isa);
    });
  }
}

Model::ExpertScratch Model::MoeScratch::TakeExpertScratch(size_t inter, size_t lut_floats,
                                                          size_t derived_bytes) {
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

void Model::MoeScratch::GiveBackExpertScratch(ExpertScratch x) {
  std::lock_guard<std::mutex> lock(tables_mu);
  spare_experts.push_back(std::move(x));
}

Status Model::MoeChunk(int L, int position, int T, const float* h, float* out, int ahead) {
  const Layer& l = *layers_[L];
  const int E = c_.n_experts, k = c_.top_k, hid = c_.hidden, inter = c_.moe_inter;
  const ExpertQuant& q = ct_.manifest().quant;
  const RecordLayout& lay = ct_.record_layout();
  const int base = ct_.manifest().Bank(L)->codebook_base;

  // Route every token of the chunk.
  std::vector<Routing> route(T);
  std::vector<float> logits(E);
  for (int t = 0; t < T; ++t) {
    MatVec(*l.router, h + static_cast<size_t>(t) * hid, logits.data());
    Route(c_, logits, {l.router_bias, static_cast<size_t>(E)}, &route[t]);
    if (opt_.on_route)
      opt_.on_route(position + t, L, {route[t].expert, static_cast<size_t>(route[t].count)});
  }
  // The chunk's distinct experts, in ascending id, with the (token, slot)
  // pairs each serves. Hint them all first so reads overlap the arithmetic.
  std::map<int, std::vector<std::pair<int, int>>> users;
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < route[t].count; ++j) users[route[t].expert[j]].push_back({t, j});
  std::vector<int> wanted;
  for (const auto& [e, _] : users) wanted.push_back(e);
  // Ask for the first `window` now and one more as each is taken: a chunk
  // can want more experts than the cache holds, and hinting them all would
  // evict records read for this very chunk before they are used.
  const size_t window = static_cast<size_t>(std::max(1, opt_.prefetch));
  experts_->Hint(L, std::span<const int>(wanted).first(std::min(window, wanted.size())),
                 HintKind::kDemand);
  size_t next_hint = std::min(window, wanted.size());
  // The next MoE layer's guess goes out after this layer's first demands, so
  // that idle readers start on what is needed now.
  ScoreGuesses(L, wanted);
  if (ahead >= 0) HintGuess(ahead);

  // gate and up read every token's input through the layer's own codebooks,
  // which all its experts share: their lookup tables are built once per token.
  const size_t lut_gu = kernels::VqLutFloats(hid, q.stages, q.entries);
  const size_t lut_d = kernels::VqLutFloats(inter, q.stages, q.entries);
  std::vector<const float*> books(static_cast<size_t>(3 * q.stages));  // [matrix][stage]
  for (int i = 0; i < 3 * q.stages; ++i) books[i] = ct_.Codebook(base + i).data();
  auto codebooks = [&](int matrix) { return books.data() + matrix * q.stages; };
  // Each float table is then either split into byte planes (the exact
  // kernel without gathers, where it covers the format) or quantized (the
  // int8 table, when asked for).
  const bool int8 = opt_.expert_table == kernels::VqTable::kI8;
  const bool split = !int8 && kernels::VqSplitCovers(q.index_bits, q.index_block, opt_.isa);
  const size_t derived_gu_bytes = int8    ? kernels::VqQLutBytes(hid, q.stages, q.index_bits)
                         : split ? kernels::VqSplitLutBytes(hid, q.stages)
                                 : 0;
  // The buffers only grow (resize keeps what was there; every byte read
  // below is first written for this chunk).
  std::vector<uint8_t>& derived_gu = moe_.derived_gu;
  derived_gu.resize(std::max(derived_gu.size(), static_cast<size_t>(T) * 2 * derived_gu_bytes));
  const size_t derived_down_bytes = int8    ? kernels::VqQLutBytes(inter, q.stages, q.index_bits)
                                    : split ? kernels::VqSplitLutBytes(inter, q.stages)
                                            : 0;
  // The products read only the derived tables when there are any, so then
  // the float tables are scratch (a 32-token chunk's would be 56 MiB at the
  // 48B shapes).
  const bool keep_float = !int8 && !split;
  std::vector<float>& luts = moe_.luts;
  if (keep_float) luts.resize(std::max(luts.size(), static_cast<size_t>(T) * 2 * lut_gu));
  if (moe_.table_floats != lut_gu) {  // another layer shape: the spares do not fit
    std::lock_guard<std::mutex> lock(moe_.tables_mu);
    moe_.spare_tables.clear();
    moe_.table_floats = lut_gu;
  }
  auto derive = [&](const float* lut, int64_t cols, uint8_t* table) {
    if (int8)
      kernels::VqQuantizeLut(lut, cols, q.stages, q.entries, q.index_bits, table, opt_.isa);
    else if (split)
      kernels::VqSplitLut(lut, cols, q.stages, q.entries, table, opt_.isa);
  };
  auto apply = [&](const kernels::VqMatrixView& v, const float* lut, const uint8_t* derived,
                   float* y, int64_t a, int64_t b) {
    if (int8)
      kernels::VqApplyQ(v, derived, y, a, b, opt_.isa);
    else
      kernels::VqApplySplit(v, lut, split ? derived : nullptr, y, a, b, opt_.isa);
  };
  const auto te = Clock::now();
  // Every token's gate and up tables are independent, so the pool builds
  // them (each wholly one thread's: the split cannot change a bit); a float
  // table that is only scratch is the chunk's own.
  pool_.ParallelFor(q.lossless() ? 0 : 2 * T, 1, [&](int64_t i0, int64_t i1) {
    std::unique_ptr<float[]> scratch;
    if (!keep_float) {
      std::lock_guard<std::mutex> lock(moe_.tables_mu);
      if (moe_.spare_tables.empty()) {
        scratch = std::make_unique_for_overwrite<float[]>(lut_gu);
      } else {
        scratch = std::move(moe_.spare_tables.back());
        moe_.spare_tables.pop_back();
      }
    }
    struct GiveBack {  // even if a kernel throws
      MoeScratch& m;
      std::unique_ptr<float[]>& table;
      ~GiveBack() {
        if (!table) return;
        std::lock_guard<std::mutex> lock(m.tables_mu);
        m.spare_tables.push_back(std::move(table));
      }
    } give_back{moe_, scratch};
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / 2;
      float* lut = keep_float ? luts.data() + i * lut_gu : scratch.get();
      kernels::VqBuildLut(codebooks(static_cast<int>(i % 2)), q.stages, q.entries, h + t * hid,
                          hid, lut, opt_.isa);
      derive(lut, hid, derived_gu.data() + i * derived_gu_bytes);
    }
  });
  // [t][j][hidden]: slot j of token t is written whole by its expert before
  // it is read, and slots past a token's route count are never read.
  std::vector<float>& per_slot = moe_.per_slot;
  per_slot.resize(std::max(per_slot.size(), static_cast<size_t>(T) * k * hid));

  // The experts themselves, one whole expert per thread at a time, taken
  // from a shared list: each is computed alone over all its rows (no
  // barrier per matrix, and SiLU and down's table are not a serial step
  // that leaves the other thread idle). Records already in memory are taken
  // first, so a late read overlaps the others' arithmetic; the layer's
  // shared expert (weights in the trunk, one piece of work per token) is
  // taken when no record is ready, filling what would be a wait.
  //
  // Only the calling thread (the owner) may hint or wait in Acquire: a
  // daemon client's connection belongs to one thread. The other threads
  // take only what they can pin at once (TryAcquire) and shared experts,
  // and poll while the owner waits for a read. Each expert writes its own
  // per-slot outputs, summed in routing order below, and a row's arithmetic
  // does not depend on the thread or range that computes it, so neither
  // order nor thread changes a bit.
  struct Shared {
    std::mutex mu;
    std::vector<int> pending;  // ascending ids, not yet taken
    size_t next_hint = 0;      // of `wanted`: the next demand hint to send
    size_t hints_due = 0;      // records taken since the owner last hinted
    int shared_next = 0;       // tokens whose shared expert is taken
    bool owner_working = false;
    double wait = 0;           // blocked or polling, summed over the threads
    Status error = Status::Ok();
  } sh;
  sh.pending = wanted;
  sh.next_hint = next_hint;
  // [T][hidden]: each token's shared-expert output, when the layer has one.
  const int shared_tokens = l.gate ? T : 0;
  std::vector<float>& shared_out = moe_.shared_out;
  shared_out.resize(std::max(shared_out.size(), static_cast<size_t>(shared_tokens) * hid));

  auto view = [&](const uint8_t* rec, int m) {
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
  };
  // One expert's arithmetic for every token routed to it, on this thread.
  auto compute = [&](int e, const uint8_t* rec, ExpertScratch& x) {
    const std::vector<std::pair<int, int>>& who = users[e];
    if (q.lossless()) {
      ApplyBf16Expert(rec, who, h, per_slot.data());  // its ParallelFor runs on this thread
      return;
    }
    const kernels::VqMatrixView vg = view(rec, 0), vu = view(rec, 1), vd = view(rec, 2);
    for (const auto& [t, j] : who) {
      const float* lg = keep_float ? luts.data() + (2 * t) * lut_gu : nullptr;
      const float* lu = keep_float ? luts.data() + (2 * t + 1) * lut_gu : nullptr;
      const uint8_t* qg = derived_gu.data() + (2 * t) * derived_gu_bytes;
      const uint8_t* qu = derived_gu.data() + (2 * t + 1) * derived_gu_bytes;
      apply(vg, lg, qg, x.g.data(), 0, inter);
      apply(vu, lu, qu, x.u.data(), 0, inter);
      for (int i = 0; i < inter; ++i) x.g[i] = Silu(x.g[i]) * x.u[i];
      kernels::VqBuildLut(codebooks(2), q.stages, q.entries, x.g.data(), inter,
                          x.lut_down.data(), opt_.isa);
      derive(x.lut_down.data(), inter, x.derived_down.data());
      float* dst = per_slot.data() + (static_cast<size_t>(t) * k + j) * hid;
      apply(vd, x.lut_down.data(), x.derived_down.data(), dst, 0, hid);
    }
  };
  auto shared_expert = [&](int t) {  // DenseMlp's ParallelFors run on this thread
    DenseMlp(L, h + static_cast<size_t>(t) * hid, shared_out.data() + static_cast<size_t>(t) * hid);
  };

  // The owner: takes a ready record, else a shared expert, else the first
  // record still missing, and waits for it. Sends the demand hints that the
  // window allows for every record taken (by any thread) since its last take.
  auto owner = [&](ExpertScratch& x) {
    {
      std::lock_guard<std::mutex> lock(sh.mu);
      sh.owner_working = true;
    }
    for (;;) {
      int e = -1, t = -1;
      {
        std::lock_guard<std::mutex> lock(sh.mu);
        for (; sh.hints_due > 0 && sh.next_hint < wanted.size(); --sh.hints_due)
          experts_->Hint(L, std::span<const int>(&wanted[sh.next_hint++], 1), HintKind::kDemand);
        if (!sh.error.ok()) break;
        size_t pick = sh.pending.size();
        for (size_t i = 0; i < sh.pending.size(); ++i)
          if (experts_->Ready(L, sh.pending[i])) {
            pick = i;
            break;
          }
        if (pick == sh.pending.size() && sh.shared_next < shared_tokens) {
          t = sh.shared_next++;
        } else if (!sh.pending.empty()) {
          if (pick == sh.pending.size()) pick = 0;
          e = sh.pending[pick];
          sh.pending.erase(sh.pending.begin() + static_cast<std::ptrdiff_t>(pick));
          ++sh.hints_due;
        } else {
          break;
        }
      }
      if (t >= 0) {
        shared_expert(t);
        continue;
      }
      const auto tw = Clock::now();
      auto rec = experts_->Acquire(L, e);
      const double waited = Since(tw);
      {
        std::lock_guard<std::mutex> lock(sh.mu);
        sh.wait += waited;
        if (!rec.ok() && sh.error.ok()) sh.error = rec.status();
      }
      if (!rec.ok()) break;
      compute(e, *rec, x);
      experts_->Release(L, e);
    }
    std::lock_guard<std::mutex> lock(sh.mu);
    sh.owner_working = false;
  };
  // Another thread: takes a record it can pin at once, else a shared
  // expert; polls while the owner may still make records ready; stops when
  // everything is taken.
  auto helper = [&](ExpertScratch& x) {
    for (;;) {
      int e = -1, t = -1;
      const uint8_t* rec = nullptr;
      {
        std::lock_guard<std::mutex> lock(sh.mu);
        if (!sh.error.ok()) return;
        for (size_t i = 0; i < sh.pending.size() && !rec; ++i) {
          if (!experts_->Ready(L, sh.pending[i])) continue;
          auto r = experts_->TryAcquire(L, sh.pending[i]);
          if (!r.ok()) {
            sh.error = r.status();
            return;
          }
          if (*r) {
            rec = *r;
            e = sh.pending[i];
            sh.pending.erase(sh.pending.begin() + static_cast<std::ptrdiff_t>(i));
            ++sh.hints_due;
          }
        }
        if (!rec && sh.shared_next < shared_tokens) t = sh.shared_next++;
        if (!rec && t < 0 && (sh.pending.empty() || !sh.owner_working)) return;
      }
      if (rec) {
        compute(e, rec, x);
        experts_->Release(L, e);
      } else if (t >= 0) {
        shared_expert(t);
      } else {  // every record left is being read
        const auto tw = Clock::now();
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        std::lock_guard<std::mutex> lock(sh.mu);
        sh.wait += Since(tw);
      }
    }
  };
  // A thread holds one pin at a time, so no more threads than the source
  // can pin at once (a one-slot cache computes on one thread).
  const int workers = static_cast<int>(std::min<uint64_t>(pool_.size(), experts_->PinLimit()));
  const std::thread::id owner_thread = std::this_thread::get_id();
  auto run = [&](bool as_owner) {
    ExpertScratch x = moe_.TakeExpertScratch(inter, lut_d, derived_down_bytes);
    struct GiveBack {  // even if a kernel throws
      MoeScratch& m;
      ExpertScratch& x;
      ~GiveBack() { m.GiveBackExpertScratch(std::move(x)); }
    } give_back{moe_, x};
    as_owner ? owner(x) : helper(x);
  };
  pool_.ParallelFor(workers, 1, [&](int64_t, int64_t) {
    run(std::this_thread::get_id() == owner_thread);
  });
  // The pool may have run every chunk on its other threads, which cannot
  // wait for reads: the owner finishes whatever is left.
  run(true);
  if (!sh.error.ok()) return sh.error;
  // Waiting is the threads' blocked and polling time averaged over them, so
  // that it and the arithmetic add up to the time this section took.
  const double wait = sh.wait / workers;
  times_.expert_wait += wait;
  times_.experts += Since(te) - wait;

  // Per token, in routing order: the weighted experts, then the shared expert.
  for (int t = 0; t < T; ++t) {
    float* o = out + static_cast<size_t>(t) * hid;
    std::fill(o, o + hid, 0.f);
    for (int j = 0; j < route[t].count; ++j) {
      const float w = route[t].weight[j];
      const float* src = per_slot.data() + (static_cast<size_t>(t) * k + j) * hid;
      for (int i = 0; i < hid; ++i) o[i] += w * src[i];
    }
    if (l.gate) {
      const float* shared = shared_out.data() + static_cast<size_t>(t) * hid;
      for (int i = 0; i < hid; ++i) o[i] += shared[i];
    }
  }
  return Status::Ok();
}

void Model::Attention(int L, Session& s, int pos, const float* h, float* out) {
  switch (layers_[L]->plan.attention) {
    case LayerKind::kKda:
      Kda(L, s, h, out);
      break;
    case LayerKind::kMla:
      Mla(L, s, pos, h, out);
      break;
  }
}

Status Model::ForwardChunk(Session& s, std::span<const int> tokens, float* logits_out, bool all) {
  const int T = static_cast<int>(tokens.size()), hid = c_.hidden;
  if (s.position + T > s.max_context && c_.n_kda_layers() < c_.n_layers)
    return Status::Error("context is full (" + std::to_string(s.max_context) + " tokens)");
  std::vector<float> x(static_cast<size_t>(T) * hid), hn(static_cast<size_t>(T) * hid),
      y(static_cast<size_t>(T) * hid);
  // The lookahead's own input, so that nothing the real path reads is
  // written: [T][hidden], allocated only when the lookahead is on.
  std::vector<float> guess_in(guess_config_.top_k > 0 ? static_cast<size_t>(T) * hid : 0);
  // Lookahead records hinted per layer and chunk: a long chunk's guesses
  // must not flood a small cache, so no more than the demand window.
  const size_t cap = static_cast<size_t>(std::max(1, opt_.prefetch));
  for (int t = 0; t < T; ++t)
    WASTE_RETURN_IF_ERROR(trunk_->EmbeddingRow(tokens[t], x.data() + static_cast<size_t>(t) * hid));
  for (int L = 0; L < c_.n_layers; ++L) {
    const Layer& l = *layers_[L];
    const auto ta = Clock::now();
    const uint64_t ja = pool_.jobs();
    for (int t = 0; t < T; ++t) {
      float* xt = x.data() + static_cast<size_t>(t) * hid;
      float* ht = hn.data() + static_cast<size_t>(t) * hid;
      float* yt = y.data() + static_cast<size_t>(t) * hid;
      RmsNorm(xt, l.in_norm, hid, c_.rms_eps, ht);
      Attention(L, s, s.position + t, ht, yt);
      for (int i = 0; i < hid; ++i) xt[i] += yt[i];
      RmsNorm(xt, l.post_norm, hid, c_.rms_eps, ht);
    }
    times_.attention += Since(ta);
    attention_jobs_ += pool_.jobs() - ja;
    // Lookahead: the next layer's router (when it has one) on the residual
    // as it stands, normed with that layer's own post-attention norm, as its
    // router will see it two residual updates later. On kl48b this guessed
    // 81.4% right at 8 per token, against 80.7% through this layer's norm
    // (the state this layer's FFN sees) and 75.2% unnormed (MEASUREMENTS.md).
    const bool next_moe = L + 1 < c_.n_layers && layers_[L + 1]->plan.ffn == FfnKind::kMoe;
    const int ahead = guess_config_.top_k > 0 && next_moe ? L + 1 : -1;
    if (ahead >= 0) {
      const auto tl = Clock::now();
      for (int t = 0; t < T; ++t)
        RmsNorm(x.data() + static_cast<size_t>(t) * hid, layers_[ahead]->post_norm, hid, c_.rms_eps,
                guess_in.data() + static_cast<size_t>(t) * hid);
      guess_[ahead] = GuessExperts(ahead, T, guess_in.data(), cap);
      times_.lookahead += Since(tl);
    }
    if (l.plan.ffn == FfnKind::kMoe) {
      WASTE_RETURN_IF_ERROR(MoeChunk(L, s.position, T, hn.data(), y.data(), ahead));
    } else {
      if (ahead >= 0) HintGuess(ahead);
      const auto to = Clock::now();
      for (int t = 0; t < T; ++t)
        DenseMlp(L, hn.data() + static_cast<size_t>(t) * hid,
                 y.data() + static_cast<size_t>(t) * hid);
      times_.other += Since(to);
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  if (opt_.lookahead_next_token && guess_config_.top_k > 0 && first_moe_ >= 0) {
    // The next token's first MoE layer, from this chunk's last final state.
    const auto tl = Clock::now();
    const int first = first_moe_;
    std::vector<float> v(hid);  // [hidden]
    RmsNorm(x.data() + static_cast<size_t>(T - 1) * hid, layers_[first]->post_norm, hid, c_.rms_eps,
            v.data());
    next_token_guess_ = GuessExperts(first, 1, v.data(), cap);
    times_.lookahead += Since(tl);
    if (!next_token_guess_.empty()) {
      experts_->Hint(first, next_token_guess_, HintKind::kLookahead);
      next_token_stats_.hinted += next_token_guess_.size();
    }
  }
  const auto th = Clock::now();
  for (int t = all ? 0 : T - 1; t < T; ++t) {
    RmsNorm(x.data() + static_cast<size_t>(t) * hid, final_norm_, hid, c_.rms_eps, hn.data());
    MatVec(*lm_head_, hn.data(), logits_out + (all ? static_cast<size_t>(t) * c_.vocab : 0));
  }
  times_.other += Since(th);
  s.position += T;
  return Status::Ok();
}

Status Model::Forward(Session& s, std::span<const int> tokens, float* logits,
                      std::vector<float>* all_logits) {
  if (tokens.empty()) return Status::Error("no tokens to run");
  for (int id : tokens)
    if (id < 0 || id >= c_.vocab)
      return Status::Error("token id " + std::to_string(id) + " is outside the vocabulary of " +
                           std::to_string(c_.vocab));
  if (all_logits) all_logits->assign(tokens.size() * static_cast<size_t>(c_.vocab), 0.f);
  std::vector<float> last(c_.vocab);
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(opt_.chunk)) {
    const auto part = tokens.subspan(at, std::min<size_t>(opt_.chunk, tokens.size() - at));
    float* dst = all_logits ? all_logits->data() + at * static_cast<size_t>(c_.vocab) : last.data();
    WASTE_RETURN_IF_ERROR(ForwardChunk(s, part, dst, all_logits != nullptr));
    experts_->TokensDone(static_cast<int>(part.size()));
  }
  if (logits) {
    const float* src =
        all_logits ? all_logits->data() + (tokens.size() - 1) * static_cast<size_t>(c_.vocab)
                   : last.data();
    std::copy(src, src + c_.vocab, logits);
  }
  return Status::Ok();
}

}  // namespace waste
