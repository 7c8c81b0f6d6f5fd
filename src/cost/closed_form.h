// SPDX-License-Identifier: Apache-2.0
// The paper's closed form (docs/cost_model.md §7-§10): the least transfers a diagram needs
// across one level of M values, H*(M) = sum_t alpha_t * M^(-beta_t), found by optimising the
// tile sizes of the woven axes under the memory constraint; its multi-level, quantized and
// cluster forms; and the compute-bound thresholds it implies on a machine.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"
#include "sched/streaming.h"

namespace napkin::cost {

// One term: the transfers of one tensor (re-read once per tile of every tiled axis it lacks).
struct Term {
  std::string tensor;
  std::vector<std::string> axes;         // the tensor's axes
  std::vector<std::string> reread_axes;  // tiled axes the tensor is not woven over
  double alpha = 0;                      // values
  double beta = 0;                       // found from the optimum: -dlog(term)/dlog(M), exact
                                         // (snapped to a rational of denominator <= 24)
};

// At the optimum, each useful tile size grows as g = coefficient * M^exponent. Tiled axes that
// every term sees alike (equal exponents in every transfer and memory monomial: a batch axis
// beside m in a batched matmul with shared weights) matter only through the product of their
// tiles, and get one relation for that product.
struct TileRelation {
  std::string axis;                // the axis, or the axes of a product joined by '*': "b*m"
  std::vector<std::string> axes;   // the axes whose tiles' product the relation gives
  double coefficient = 0;
  double exponent = 0;             // exact: a rational with a small denominator when it is one
  std::string text;  // "g_q = M/(2*d)", "g_m = M^(1/2)", "g_b*g_m = M^(1/2) (only the product matters)"
};

struct ClosedForm {
  std::vector<std::string> tiled_axes;     // woven axes that some tensor lacks (worth tiling)
  std::vector<std::string> resident;       // tensors held for a whole group (lack every streamed axis)
  std::vector<Term> terms;
  std::vector<TileRelation> relations;
  double flops = 0;                        // K: 2 per multiply-add of every contraction
  std::vector<std::vector<std::string>> contraction_loops;  // the axes each contraction loops over

  // H*(M) in values for M values of memory at the level, from the optimised tiles.
  double transfers(double memory_values) const;
  // "H*(M) = 6.7109e+07 + 1.0995e+12*M^-1": one term per beta (terms of equal beta merged).
  std::string text() const;
  // Sum of alpha over the terms whose beta equals `beta` (within 1e-6).
  double alpha_for(double beta) const;

  // Internal: the optimisation problem, kept to evaluate H*(M) at any M.
  struct Monomial {
    double coefficient = 0;
    std::vector<int> exponents;  // per tiled axis: -1 / 0 (transfers), 0 / 1 (memory)
  };
  std::vector<Monomial> transfer_terms;  // parallel to `terms`
  std::vector<Monomial> memory_terms;
  std::vector<double> axis_sizes;        // per tiled axis
  // The tiled axes (indices) in groups of equal exponent columns: the optimisation's variables.
  std::vector<std::vector<std::size_t>> groups;
  // Per group, the optimal log of the product of its tiles for exp(log_memory_values) values;
  // g_a >= 1 (no upper bound: the asymptotic form). Computed in log space throughout (no
  // overflow at any M), then refined by Newton's method on the optimality conditions.
  std::vector<double> optimal_log_tiles(double log_memory_values) const;
};

// Pre: report = analyse_streaming(d). Resident tensors (inputs and outputs lacking every
// streamed axis) fill the memory; streamed chunks are taken as vanishingly small, as the
// paper does ("with s small").
ClosedForm derive_closed_form(const ir::Diagram& d, const sched::StreamingReport& report);

// §8 Multi-level: sum over levels of H*(M_l) / H-dot_l (seconds), M in values.
struct LevelRate {
  std::string name;
  double memory_values = 0;
  double values_per_s = 0;
};
double multilevel_time_s(const ClosedForm& f, const std::vector<LevelRate>& levels);

// §9 Quantization: transfers in bytes at `memory_bytes` of memory with q bytes per value:
// q * H*(memory_bytes / q) = sum_t alpha_t * memory_bytes^(-beta_t) * q^(1 + beta_t).
double transfer_bytes(const ClosedForm& f, double memory_bytes, double bytes_per_value);

// §10 Cross-transfer (cluster) level: N children of M_c values each sharing through a faster
// link: (1/H_hc - 1/H_xc) * H*(N * M_c) + (1/H_xc) * H*(M_c), in seconds.
double cluster_time_s(const ClosedForm& f, double child_memory_values, int cluster_size,
                      double parent_values_per_s, double cross_values_per_s);

// §11 Compute-bound thresholds on a machine with `flops_per_s` of compute and a link of
// `values_per_s`: every term must move at most values_per_s / flops_per_s values per FLOP.
struct Threshold {
  std::string kind;   // "memory" (a beta > 0 term), "axis" (the beta = 0 terms), "tile"
  double value = 0;   // values of memory, an axis size, or a tile size
  std::string text;
};
std::vector<Threshold> compute_bound_thresholds(const ClosedForm& f, const ir::Diagram& d,
                                                double flops_per_s, double values_per_s);

}  // namespace napkin::cost
