// Model, the public face: loading, running tokens and the counters, over
// the forward pass (forward.h).

#include "engine/model/model.h"

#include <algorithm>
#include <string>

#include "engine/model/forward.h"

namespace waste {
namespace {

// What Model::Load refuses whatever the trunk.
Status CheckLoad(const Container& ct, ExpertSource* experts, const ModelOptions& opt) {
  const ModelConfig& c = ct.config();
  if (c.tie_embeddings) return Status::Error("tie_word_embeddings is not implemented");
  if (opt.chunk < 1) return Status::Error("chunk must be at least 1");
  if (opt.lookahead < 0) return Status::Error("lookahead must be at least 0");
  if (opt.experts_per_token != 0 && (c.n_moe_layers() == 0 || c.top_k < 1))
    return Status::Error("experts per token " + std::to_string(opt.experts_per_token) +
                         ": this model has no routed experts");
  if (opt.experts_per_token < 0 || opt.experts_per_token > c.top_k)
    return Status::Error("experts per token " + std::to_string(opt.experts_per_token) +
                         ": must be 1 to the model's top_k, " + std::to_string(c.top_k));
  if (c.n_moe_layers() > 0 && !experts) return Status::Error("a MoE model needs an expert source");
  return Status::Ok();
}

}  // namespace

Model::Model(std::unique_ptr<ForwardPass> pass) : pass_(std::move(pass)) {}

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
  auto pass = ForwardPass::Build(ct, experts, opt, std::move(trunk));
  if (!pass.ok()) return pass.status();
  return std::unique_ptr<Model>(new Model(std::move(*pass)));
}

const ModelConfig& Model::config() const { return pass_->config(); }
const Container& Model::container() const { return pass_->container(); }
int Model::threads() const { return pass_->context().pool.size(); }
int Model::lookahead() const { return pass_->lookahead().top_k(); }
Session Model::NewSession(int max_context) const { return pass_->NewSession(max_context); }
const PhaseTimes& Model::times() const { return pass_->context().times; }
StepParts Model::step_parts() const { return pass_->context().parts(); }
PoolJobs Model::pool_jobs() const {
  return {pass_->attention_jobs(), pass_->context().pool.jobs()};
}
const LookaheadStats& Model::lookahead_stats() const { return pass_->lookahead().stats(); }
const LookaheadStats& Model::next_token_stats() const {
  return pass_->lookahead().next_token_stats();
}
std::span<const float> Model::rope_inv_freq() const { return pass_->context().rotary.inv_freq; }
float Model::softmax_scale() const { return pass_->context().softmax_scale; }

const char* StepPartName(StepPart p) {
  switch (p) {
    case StepPart::kAttentionProducts: return "attention_products";
    case StepPart::kRouter: return "router";
    case StepPart::kLookahead: return "lookahead";
    case StepPart::kGateUpTables: return "gate_up_tables";
    case StepPart::kLatentProducts: return "latent_products";
    case StepPart::kRoutedExperts: return "routed_experts";
    case StepPart::kDownTables: return "down_tables";
    case StepPart::kSharedExperts: return "shared_experts";
    case StepPart::kDenseMlp: return "dense_mlp";
    case StepPart::kHead: return "head";
    case StepPart::kCount: break;
  }
  return "?";
}

Status Model::CheckTokens(std::span<const int> tokens) const {
  const int vocab = config().vocab;
  if (tokens.empty()) return Status::Error("no tokens to run");
  for (int id : tokens)
    if (id < 0 || id >= vocab)
      return Status::Error("token id " + std::to_string(id) + " is outside the vocabulary of " +
                           std::to_string(vocab));
  return Status::Ok();
}

Status Model::Forward(Session& s, std::span<const int> tokens, float* logits,
                      std::vector<float>* all_logits) {
  WASTE_RETURN_IF_ERROR(CheckTokens(tokens));
  const size_t vocab = static_cast<size_t>(config().vocab);
  const size_t chunk = static_cast<size_t>(pass_->options().chunk);
  ExpertSource* experts = pass_->experts();  // none in a dense model
  if (all_logits) all_logits->assign(tokens.size() * vocab, 0.f);
  std::vector<float> last(vocab);
  for (size_t at = 0; at < tokens.size(); at += chunk) {
    const auto part = tokens.subspan(at, std::min(chunk, tokens.size() - at));
    float* dst = all_logits ? all_logits->data() + at * vocab : last.data();
    const BatchItem item{&s, part, dst};
    WASTE_RETURN_IF_ERROR(pass_->Chunk({&item, 1}, all_logits != nullptr));
    if (experts) experts->TokensDone(static_cast<int>(part.size()));
  }
  if (logits) {
    const float* src = all_logits ? all_logits->data() + (tokens.size() - 1) * vocab : last.data();
    std::copy(src, src + vocab, logits);
  }
  return Status::Ok();
}

Status Model::ForwardBatch(std::span<const BatchItem> items) {
  if (items.empty()) return Status::Error("no sequences to run");
  size_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].session || !items[i].logits) return Status::Error("a batch item without a session or logits");
    WASTE_RETURN_IF_ERROR(CheckTokens(items[i].tokens));
    for (size_t j = 0; j < i; ++j)
      if (items[j].session == items[i].session)
        return Status::Error("a session appears twice in one batch");
    total += items[i].tokens.size();
  }
  WASTE_RETURN_IF_ERROR(pass_->Chunk(items, false));
  if (ExpertSource* experts = pass_->experts()) experts->TokensDone(static_cast<int>(total));
  return Status::Ok();
}

}  // namespace waste
