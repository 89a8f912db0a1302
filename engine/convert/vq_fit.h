// Residual vector quantization of expert matrices, as the expert formats
// store them (docs/FORMAT.md): W[r, 8v:8v+8] = scale[r] * sum over stages s
// of codebook[s][index(r, v, s)].
//
// Codebooks are fitted per layer and per matrix kind (gate, up, down) by
// k-means on 8-dim vectors of row-normalized weights (each row divided by
// its RMS) drawn from a sample of the layer's experts: stage 0 on the
// vectors, each next stage on what the stages before leave. Every expert is
// then quantized against them: greedy residual search stage by stage, then
// each row's scale refitted by least squares to the chosen vectors.
//
// Every "nearest entry" here is engine/kernels/nearest.h's, whose SIMD paths
// give the scalar rule's index bit for bit: the bytes written do not depend
// on the CPU or on VqFitOptions::isa.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/kernels/cpu.h"

namespace waste::convert {

struct VqFitOptions {
  int sample_experts = 8;   // experts per layer the codebooks are fitted on
  int max_vectors = 65536;  // vectors per matrix kind, drawn evenly from the sample
  int iterations = 12;      // Lloyd iterations per stage
  uint64_t seed = 1;
  int threads = 1;  // for the assignment steps; the result does not depend on it
  // The nearest-entry search's path (engine/kernels/nearest.h); every path
  // gives the same bits, so the result does not depend on it either.
  kernels::Isa isa = kernels::BestIsa();
};

// Appends the 8-dim vectors of `rows` x `cols` weights (row-major), each row
// divided by its RMS, taking every `step`-th vector.
void AppendNormalizedVectors(const float* w, int64_t rows, int64_t cols, int64_t step,
                             std::vector<float>* out);

// Fits `stages` codebooks of `entries` 8-dim entries to `vectors` (n x 8):
// returns stages * entries * 8 floats, already rounded to f16 as stored.
std::vector<float> FitResidualCodebooks(std::span<const float> vectors, int stages, int entries,
                                        const VqFitOptions& o);

struct QuantError {
  double err2 = 0;   // sum of squared differences from the original weights
  double norm2 = 0;  // sum of squared original weights
  double relative() const { return norm2 > 0 ? std::sqrt(err2 / norm2) : 0.0; }
};

// Quantizes `w` (rows x cols, cols a multiple of 8) against `books` (stages *
// entries * 8, f16-exact): indices stage-major [stage][row * (cols / 8) + v]
// (stages * rows * cols / 8 bytes), f16 row scales [rows]. Returns the error
// of the weights as the record will decode them. `isa`: the search's path,
// which does not change the result.
QuantError QuantizeMatrix(const float* w, int64_t rows, int64_t cols, const float* books,
                          int stages, int entries, kernels::Isa isa, uint8_t* indices,
                          uint16_t* scales);

}  // namespace waste::convert
