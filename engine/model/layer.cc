// The services layers share (LayerContext), norm weights as the layers read
// them, and a session's memory carved into the layers' parts.

#include "engine/model/layer.h"

#include <chrono>

namespace waste {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

LayerContext::LayerContext(const ModelConfig& config, const ModelOptions& options)
    : c(config),
      opt(options),
      pool(options.threads > 0 ? options.threads : kernels::DefaultThreads()) {}

void LayerContext::MatVec(const kernels::MatrixView& w, const float* x, float* y) {
  MatVecs({{&w, x, y}});
}

void LayerContext::MatVecMany(const kernels::MatrixView& w, std::span<const float* const> xs,
                              std::span<float* const> ys) {
  const auto t = Clock::now();
  kernels::MatVecMany(pool, w, xs, ys, 32, opt.isa, opt.q4_input);
  Charge(charge, Since(t), kernels::MatrixBytes(w));
}

void LayerContext::MatVecsMany(std::initializer_list<kernels::MatVecManyJob> jobs) {
  const auto t = Clock::now();
  kernels::MatVecsMany(pool, {jobs.begin(), jobs.size()}, 32, opt.isa, opt.q4_input);
  uint64_t bytes = 0;
  for (const kernels::MatVecManyJob& j : jobs) bytes += kernels::MatrixBytes(*j.w);
  Charge(charge, Since(t), bytes);
}

void LayerContext::MatVecs(std::initializer_list<kernels::MatVecJob> jobs) {
  const auto t = Clock::now();
  kernels::MatVecs(pool, {jobs.begin(), jobs.size()}, 32, opt.isa, opt.q4_input);
  uint64_t bytes = 0;
  for (const kernels::MatVecJob& j : jobs) bytes += kernels::MatrixBytes(*j.w);
  Charge(charge, Since(t), bytes);
}

void LayerContext::Charge(StepPart p, double seconds, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(parts_mu_);
  parts_.seconds[static_cast<int>(p)] += seconds;
  parts_.bytes[static_cast<int>(p)] += bytes;
}

StepParts LayerContext::parts() const {
  std::lock_guard<std::mutex> lock(parts_mu_);
  return parts_;
}

const float* NormWeights::Get(const std::string& name, int n) {
  const float* w = t_.Vector(name);
  if (!c_.zero_centered_norms) return w;
  std::vector<float>& shifted = *shifted_.emplace_back(std::make_unique<std::vector<float>>(n));
  for (int i = 0; i < n; ++i) shifted[i] = 1.f + w[i];
  return shifted.data();
}

std::span<float> StateCarver::Take(size_t n) {
  const size_t line = (n + 15) / 16 * 16;  // 16 floats: the next part starts on a 64-byte line
  total_ += line;
  if (!next_) return {};
  std::span<float> part(next_, n);
  next_ += line;
  return part;
}

}  // namespace waste
