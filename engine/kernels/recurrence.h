// The attention layers' own loops (not matrix products over stored weights):
// the KDA and Gated DeltaNet state updates and the two float sums MLA's absorbed attention makes
// per head. model.cc calls these; the scalar reference and the dispatch are
// in recurrence.cc, the AVX-512 and AVX2 paths in recurrence_avx512.cc and
// recurrence_avx2.cc.
//
// Every SIMD path here computes each output element with the same float
// operations in the same order as the scalar reference (a multiply and a
// separate add, never a fused one; sums run over the same index in the same
// direction), so all paths give the same bits, and switching the Isa can
// never change a logit.
#pragma once

#include <cstdint>

#include "engine/kernels/cpu.h"

namespace waste::kernels {

// One decode step of a KDA head's recurrent state, in place:
//   S <- diag(decay) S;  u = S^T k;  u <- b (v - u);  S += k u^T;  o = S^T q.
// S: [d][d] row-major, indexed [key][value]. decay, k, q: [d] (key side);
// v: [d] (value side). u: [d] scratch. o: [d] output. d >= 1.
// Two passes over S: row i is decayed and read for u, then updated and read
// for o. Sums over i run in ascending order.
void KdaStateStep(float* S, int d, const float* decay, const float* k, const float* v, float b,
                  const float* q, float* u, float* o, Isa isa);

// One decode step of a Gated DeltaNet head's recurrent state, in place: the
// delta rule of KdaStateStep with one decay for the whole head and a state of
// dk keys by dv values (fla's naive_recurrent_gated_delta_rule):
//   S <- decay S;  u = S^T k;  u <- b (v - u);  S += k u^T;  o = S^T q.
// S: [dk][dv] row-major. k, q: [dk]; v, u (scratch), o (output): [dv].
// dk, dv >= 1. The same two passes and sum order as KdaStateStep.
void GatedDeltaStateStep(float* S, int dk, int dv, float decay, const float* k, const float* v,
                         float b, const float* q, float* u, float* o, Isa isa);

// y[c] = sum over r of a[r] * rows[r * stride + c], for c in [0, cols), the
// sum over r in ascending order starting from 0.f. rows: n_rows rows of at
// least cols floats, `stride` floats apart (stride >= cols). y: [cols].
// MLA uses it for the query in latent space (q_nope through the absorbed
// key rows) and for the attended latent (probabilities times cached rows).
void WeightedRowSum(const float* a, const float* rows, int64_t n_rows, int64_t stride,
                    int64_t cols, float* y, Isa isa);

}  // namespace waste::kernels
