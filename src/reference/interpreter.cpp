// SPDX-License-Identifier: Apache-2.0
#include "reference/interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include <fmt/format.h>

#include "ir/builder.h"
#include "ir/printer.h"
#include "reference/strided_loop.h"

namespace napkin::reference {

using ir::AxisId;
using ir::Diagram;
using ir::Node;
using ir::OpKind;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// splitmix64: a tiny, well-mixed generator whose output is the same on every platform.
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {  // Box-Muller
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
};

std::vector<std::int64_t> strides_over(const Tensor& t, const std::vector<AxisId>& loop) {
  std::vector<std::int64_t> s;
  for (AxisId a : loop) s.push_back(t.stride_of(a));
  return s;
}

std::vector<std::int64_t> sizes_of(const Diagram& d, const std::vector<AxisId>& loop) {
  std::vector<std::int64_t> s;
  for (AxisId a : loop) s.push_back(d.axis(a).size);
  return s;
}

// out[i] = fn(operand values at i), woven over out_axes.
template <class Fn>
Tensor map(const Diagram& d, const std::vector<AxisId>& out_axes,
           const std::vector<const Tensor*>& xs, Fn fn) {
  Tensor out = Tensor::zeros(d, out_axes);
  std::vector<std::vector<std::int64_t>> strides;
  for (const Tensor* x : xs) strides.push_back(strides_over(*x, out_axes));
  std::vector<double> vals(xs.size());
  std::size_t o = 0;
  strided_loop(sizes_of(d, out_axes), strides, [&](const std::int64_t* off) {
    for (std::size_t j = 0; j < xs.size(); ++j) vals[j] = xs[j]->data[static_cast<std::size_t>(off[j])];
    out.data[o++] = fn(vals.data());
  });
  return out;
}

// The accumulator of sums and of the values inside composite ops: T = double is the
// specification, T = float the low-precision baseline's (Arithmetic::low_precision). For T =
// double every helper is the identity, so the f64 evaluation is the same bits as without them.
template <class T> T to_acc(double x);
template <> double to_acc<double>(double x) { return x; }
// A double outside float's range is undefined behaviour for static_cast; round_to_dtype rounds
// it as IEEE 754 does (to +-inf, or to FLT_MAX within half an ulp of it).
template <> float to_acc<float>(double x) {
  return std::fabs(x) <= std::numeric_limits<float>::max() ? static_cast<float>(x)
                                                            : static_cast<float>(round_to_dtype(x, DType::f32));
}
template <class T> double acc_round(double x) { return static_cast<double>(to_acc<T>(x)); }
template <class T> double acc_add(double a, double b) { return static_cast<double>(to_acc<T>(a) + to_acc<T>(b)); }

// Reduces x over `over` with `combine`, starting from `init`.
template <class Combine>
Tensor reduce(const Diagram& d, const Tensor& x, const std::vector<AxisId>& over, double init,
              Combine combine) {
  std::vector<AxisId> kept;
  for (AxisId a : x.axes)
    if (std::find(over.begin(), over.end(), a) == over.end()) kept.push_back(a);
  std::sort(kept.begin(), kept.end());
  Tensor out = Tensor::zeros(d, kept, init);
  std::vector<AxisId> loop = kept;
  loop.insert(loop.end(), over.begin(), over.end());
  strided_loop(sizes_of(d, loop), {strides_over(out, loop), strides_over(x, loop)},
               [&](const std::int64_t* off) {
                 double& acc = out.data[static_cast<std::size_t>(off[0])];
                 acc = combine(acc, x.data[static_cast<std::size_t>(off[1])]);
               });
  return out;
}

// The product and the running sum in T, one term at a time in index order of `over` (the
// contracted axes are the innermost loops).
template <class T>
Tensor contract(const Diagram& d, const Node& n, const std::vector<const Tensor*>& xs) {
  Tensor out = Tensor::zeros(d, n.axes);
  std::vector<AxisId> loop = n.axes;
  loop.insert(loop.end(), n.over.begin(), n.over.end());
  std::vector<std::vector<std::int64_t>> strides{strides_over(out, loop)};
  for (const Tensor* x : xs) strides.push_back(strides_over(*x, loop));
  strided_loop(sizes_of(d, loop), strides, [&](const std::int64_t* off) {
    T p = to_acc<T>(xs[0]->data[static_cast<std::size_t>(off[1])]);
    for (std::size_t j = 1; j < xs.size(); ++j) p *= to_acc<T>(xs[j]->data[static_cast<std::size_t>(off[j + 1])]);
    double& acc = out.data[static_cast<std::size_t>(off[0])];
    acc = static_cast<double>(to_acc<T>(acc) + p);
  });
  return out;
}

double count_over(const Diagram& d, const std::vector<AxisId>& over) {
  return static_cast<double>(d.elements(over));
}

// Intermediate values rounded to T and sums in T (the caller rounds the result to the node's
// dtype in the low-precision evaluation).
template <class T>
Tensor composite(const Diagram& d, const Node& n, const Tensor& x) {
  const auto max2 = [](double a, double b) { return maximum(a, b); };
  const auto add2 = [](double a, double b) { return acc_add<T>(a, b); };
  switch (n.op) {
    case OpKind::softmax:
    case OpKind::logsumexp: {
      const Tensor m = reduce(d, x, n.over, -kInf, max2);
      // A slice that is entirely -inf (fully masked) has m = -inf: softmax gives 0 there. A NaN
      // in the slice makes m NaN, and with it every exp, the sum and the result.
      const Tensor e = map(d, x.axes, {&x, &m}, [](const double* v) {
        return v[1] == -kInf ? 0.0 : acc_round<T>(std::exp(v[0] - v[1]));
      });
      const Tensor s = reduce(d, e, n.over, 0.0, add2);
      if (n.op == OpKind::logsumexp)
        return map(d, n.axes, {&m, &s}, [](const double* v) {
          return v[0] == -kInf ? -kInf : v[0] + std::log(v[1]);
        });
      return map(d, n.axes, {&e, &s}, [](const double* v) { return v[1] == 0.0 ? 0.0 : v[0] / v[1]; });
    }
    case OpKind::rmsnorm: {
      const double count = count_over(d, n.over), eps = n.scalar;
      const Tensor sq = map(d, x.axes, {&x}, [](const double* v) { return acc_round<T>(v[0] * v[0]); });
      const Tensor ss = reduce(d, sq, n.over, 0.0, add2);
      return map(d, n.axes, {&x, &ss}, [&](const double* v) {
        return v[0] / std::sqrt(v[1] / count + eps);
      });
    }
    case OpKind::layernorm: {
      const double count = count_over(d, n.over), eps = n.scalar;
      const Tensor sum = reduce(d, x, n.over, 0.0, add2);
      const Tensor centred = map(d, x.axes, {&x, &sum}, [&](const double* v) { return acc_round<T>(v[0] - v[1] / count); });
      const Tensor sq = map(d, x.axes, {&centred}, [](const double* v) { return acc_round<T>(v[0] * v[0]); });
      const Tensor var = reduce(d, sq, n.over, 0.0, add2);
      return map(d, n.axes, {&centred, &var}, [&](const double* v) {
        return v[0] / std::sqrt(v[1] / count + eps);
      });
    }
    default: NAPKIN_CHECK(false, "not a composite op");
  }
}

}  // namespace

double apply_unary(const Node& n, double x) {
  switch (n.op) {
    case OpKind::exp: return std::exp(x);
    case OpKind::exp2: return std::exp2(x);
    case OpKind::log: return std::log(x);
    case OpKind::neg: return -x;
    case OpKind::tanh: return std::tanh(x);
    case OpKind::abs: return std::fabs(x);
    case OpKind::floor: return std::floor(x);
    case OpKind::logical_not: return x != 0.0 ? 0.0 : 1.0;
    case OpKind::cast: return round_to_dtype(x, n.dtype);
    case OpKind::scale: return x * n.scalar;
    case OpKind::softcap: return n.scalar * std::tanh(x / n.scalar);
    default: NAPKIN_CHECK(false, "not a unary op");
  }
}

double apply_binary(OpKind op, double a, double b) {
  switch (op) {
    case OpKind::add: return a + b;
    case OpKind::sub: return a - b;
    case OpKind::mul: return a * b;
    case OpKind::div: return a / b;
    case OpKind::max: return maximum(a, b);
    case OpKind::min: return minimum(a, b);
    case OpKind::lt: return a < b;
    case OpKind::le: return a <= b;
    case OpKind::gt: return a > b;
    case OpKind::ge: return a >= b;
    case OpKind::eq: return a == b;
    case OpKind::ne: return a != b;
    case OpKind::logical_and: return (a != 0.0) && (b != 0.0);
    case OpKind::logical_or: return (a != 0.0) || (b != 0.0);
    default: NAPKIN_CHECK(false, "not a binary op");
  }
}

double maximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return std::signbit(a) ? b : a;  // max(-0, +0) = +0
  return a > b ? a : b;
}

double minimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return std::signbit(a) ? a : b;  // min(-0, +0) = -0
  return a < b ? a : b;
}

NonFinite count_non_finite(const Tensor& t, DType as) {
  NonFinite n;
  for (double x : t.data) {
    const double v = round_to_dtype(x, as);
    if (std::isnan(v)) ++n.nan;
    else if (v == kInf) ++n.pos_inf;
    else if (v == -kInf) ++n.neg_inf;
  }
  return n;
}

std::string non_finite_text(const NonFinite& n) {
  std::vector<std::string> parts;
  if (n.nan) parts.push_back(fmt::format("{} NaN", n.nan));
  if (n.pos_inf) parts.push_back(fmt::format("{} +inf", n.pos_inf));
  if (n.neg_inf) parts.push_back(fmt::format("{} -inf", n.neg_inf));
  return fmt::format("{}", fmt::join(parts, ", "));
}

TensorMap random_inputs(const Diagram& d, std::uint64_t seed) {
  TensorMap out;
  for (ir::NodeId id : d.inputs()) {
    const Node& n = d.node(id);
    // Each input gets its own stream, so adding an input does not change the others.
    SplitMix64 rng{seed ^ ir::stable_hash(n.name)};
    Tensor t = Tensor::zeros(d, n.axes);
    if (n.dtype != DType::boolean && n.dtype != DType::i32) {
      for (double& v : t.data) v = rng.normal();
    } else {
      // Runs of 53 along the last axis, as masks and segment ids come: a bool run is all true,
      // all false, or coin flips; an i32 run one value in [-8, 8]. Along a long axis before it
      // (a [q k] mask's rows) the runs change every 61 rows, along a short one (a batch) every
      // row. Kernels that bound masks per block then meet every kind of block.
      const std::int64_t last = n.axes.empty() ? 1 : d.axis(n.axes.back()).size;
      const std::int64_t before = n.axes.size() < 2 ? 1 : d.axis(n.axes[n.axes.size() - 2]).size;
      const std::int64_t rows_per_run = before >= 2 * 61 ? 61 : 1;
      const std::uint64_t offset = rng.next() % 53, salt = rng.next();
      for (std::size_t i = 0; i < t.data.size(); ++i) {
        const auto at = static_cast<std::int64_t>(i);
        const auto run = static_cast<std::uint64_t>((at % last + static_cast<std::int64_t>(offset)) / 53);
        const auto rows = static_cast<std::uint64_t>(at / last % before / rows_per_run);
        const auto outer = static_cast<std::uint64_t>(at / last / before);
        const std::uint64_t h =
            SplitMix64{salt ^ (run * 0x9e3779b97f4a7c15ULL) ^ (rows * 0xc2b2ae3d27d4eb4fULL) ^ (outer * 0x165667b19e3779f9ULL)}
                .next();
        if (n.dtype == DType::i32) t.data[i] = static_cast<double>(static_cast<int>(h % 17) - 8);
        else t.data[i] = h % 3 == 0 ? 1.0 : h % 3 == 1 ? 0.0 : static_cast<double>(rng.next() & 1);
      }
    }
    out.emplace(n.name, std::move(t));
  }
  return out;
}

Result<std::vector<Tensor>> evaluate_all(const Diagram& d, const TensorMap& inputs, const EvalOptions& options) {
  const bool low = options.arithmetic == Arithmetic::low_precision;
  std::vector<Tensor> values;
  values.reserve(d.nodes.size());
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const Node& n = d.nodes[i];
    std::vector<const Tensor*> xs;
    for (ir::NodeId o : n.operands) xs.push_back(&values[static_cast<std::size_t>(o)]);
    // The low-precision evaluation sums in float unless the node is f64 (docs/language.md:
    // contract accumulates in f64 only if all its operands are f64).
    const bool in_float = low && n.dtype != DType::f64;
    Tensor v;
    switch (ir::op_class(n.op)) {
      case ir::OpClass::leaf:
        if (n.op == OpKind::input) {
          auto it = inputs.find(n.name);
          if (it == inputs.end()) return plain_error(fmt::format("no value given for input '{}'", n.name));
          const Tensor& given = it->second;
          std::vector<std::int64_t> want;
          for (AxisId a : n.axes) want.push_back(d.axis(a).size);
          if (given.sizes != want)
            return plain_error(fmt::format("input '{}' must have shape ({}) for {}, found ({})",
                                           n.name, fmt::join(want, ", "), ir::axes_text(d, n.axes),
                                           fmt::join(given.sizes, ", ")));
          v = given;
          v.axes = n.axes;
          for (double& x : v.data) x = round_to_dtype(x, n.dtype);
        } else if (n.op == OpKind::constant) {
          v = Tensor::zeros(d, {}, n.scalar);
        } else {
          v = Tensor::zeros(d, n.axes);
          for (std::size_t k = 0; k < v.data.size(); ++k) v.data[k] = static_cast<double>(k);
        }
        break;
      case ir::OpClass::unary:
        v = map(d, n.axes, xs, [&](const double* x) { return apply_unary(n, x[0]); });
        break;
      case ir::OpClass::binary:
        v = map(d, n.axes, xs, [&](const double* x) { return apply_binary(n.op, x[0], x[1]); });
        break;
      case ir::OpClass::ternary:
        v = map(d, n.axes, xs, [](const double* x) { return x[0] != 0.0 ? x[1] : x[2]; });
        break;
      case ir::OpClass::reduction:
        if (n.op == OpKind::reduce_sum && in_float)
          v = reduce(d, *xs[0], n.over, 0.0, [](double a, double b) { return acc_add<float>(a, b); });
        else if (n.op == OpKind::reduce_sum)
          v = reduce(d, *xs[0], n.over, 0.0, [](double a, double b) { return a + b; });
        else
          v = reduce(d, *xs[0], n.over, -kInf, [](double a, double b) { return maximum(a, b); });
        break;
      case ir::OpClass::contraction: {
        // Low precision: tensor cores multiply operands of one type, so an operand wider than
        // the narrowest is rounded to it first (FlashAttention's P in bf16 before P V; a GEMM
        // reading an f32 intermediate beside bf16 weights).
        std::vector<Tensor> narrowed;
        if (low) {
          DType narrowest = DType::f64;
          for (ir::NodeId o : n.operands)
            if (const DType t = d.node(o).dtype; is_float(t) && mantissa_bits(t) < mantissa_bits(narrowest)) narrowest = t;
          narrowed.reserve(xs.size());
          for (std::size_t k = 0; k < xs.size(); ++k)
            if (const DType t = d.node(n.operands[k]).dtype; is_float(t) && mantissa_bits(t) > mantissa_bits(narrowest)) {
              narrowed.push_back(*xs[k]);
              for (double& x : narrowed.back().data) x = round_to_dtype(x, narrowest);
              xs[k] = &narrowed.back();
            }
        }
        v = in_float ? contract<float>(d, n, xs) : contract<double>(d, n, xs);
        break;
      }
      case ir::OpClass::composite:
        v = in_float ? composite<float>(d, n, *xs[0]) : composite<double>(d, n, *xs[0]);
        break;
    }
    // Every node rounded to its dtype; i32 and bool values are integers already.
    if (low && is_float(n.dtype) && n.dtype != DType::f64)
      for (double& x : v.data) x = round_to_dtype(x, n.dtype);
    NAPKIN_CHECK(v.axes == n.axes, fmt::format("interpreter produced {} for node {} typed {}",
                                               ir::axes_text(d, v.axes), d.label(static_cast<ir::NodeId>(i)),
                                               ir::axes_text(d, n.axes)));
    values.push_back(std::move(v));
  }
  return values;
}

namespace {

// |x - reference| where the reference is finite (infinite where x is not); elsewhere 0 if x is
// the reference's own value (the same infinity, NaN for NaN), else infinite.
double element_error(double x, double reference) {
  if (std::isfinite(reference)) return std::isfinite(x) ? std::fabs(x - reference) : kInf;
  const bool same = std::isnan(reference) ? std::isnan(x) : x == reference;
  return same ? 0.0 : kInf;
}

double max_error(const Tensor& x, const Tensor& reference) {
  double e = 0;
  for (std::size_t i = 0; i < reference.data.size(); ++i) e = std::max(e, element_error(x.data[i], reference.data[i]));
  return e;
}

}  // namespace

ErrorRuleVerdict flash_attention_rule(const Diagram& d, const Tensor& reference, const Tensor& baseline,
                                      const Tensor& result) {
  NAPKIN_CHECK(baseline.data.size() == reference.data.size() && result.data.size() == reference.data.size(),
               "flash_attention_rule: the reference, the baseline and the result differ in size");
  ErrorRuleVerdict v;
  std::vector<std::string> narrow;  // the diagram's dtypes narrower than f32, in DType order
  int narrowest_bits = 23;
  for (DType t : {DType::tf32, DType::bf16, DType::f16, DType::fp8e4m3, DType::fp8e5m2})
    if (std::any_of(d.nodes.begin(), d.nodes.end(), [&](const Node& n) { return n.dtype == t; })) {
      narrow.emplace_back(dtype_name(t));
      narrowest_bits = std::min(narrowest_bits, mantissa_bits(t));
    }
  if (narrow.empty()) {
    v.message = "FlashAttention's rule not applied: every dtype of the diagram is f32 or wider, so there is "
                "no low-precision arithmetic to take as the baseline";
    return v;
  }
  v.applied = true;
  double largest = 0;
  for (double x : reference.data)
    if (std::isfinite(x)) largest = std::max(largest, std::fabs(x));
  if (largest > 0) v.slack = std::ldexp(1.0, std::ilogb(largest) - narrowest_bits);
  v.max_error = max_error(result, reference);
  v.baseline_error = max_error(baseline, reference);
  v.bound = 2 * v.baseline_error + v.slack;
  // An infinite error (a NaN or an infinity where the reference is finite) never passes, even
  // against a baseline that overflows.
  v.passed = std::isfinite(v.max_error) && v.max_error <= v.bound;
  v.message = fmt::format("max error {:.3g} {} 2 x {:.3g} + {:.3g} (FlashAttention's rule: an f32-accumulating {} baseline)",
                          v.max_error, v.passed ? "<=" : ">", v.baseline_error, v.slack, fmt::join(narrow, "/"));
  return v;
}

double work_estimate(const Diagram& d) {
  double work = 0;
  for (const Node& n : d.nodes) {
    double space = static_cast<double>(d.elements(n.axes));
    // (An axis a softmax or norm keeps is counted once: it is in the value's own axes.)
    for (AxisId a : n.over)
      if (std::find(n.axes.begin(), n.axes.end(), a) == n.axes.end()) space *= static_cast<double>(d.axis(a).size);
    work += space * (ir::op_class(n.op) == ir::OpClass::composite ? 4.0 : 1.0);
  }
  return work;
}

Result<TensorMap> evaluate(const Diagram& d, const TensorMap& inputs, const EvalOptions& options) {
  for (const auto& [name, t] : inputs) {
    const auto id = d.find_node(name);
    if (!id || d.node(*id).op != OpKind::input)
      return plain_error(fmt::format("'{}' is not an input of the diagram", name));
  }
  auto values = evaluate_all(d, inputs, options);
  if (!values) return values.error();
  // Integer arithmetic is exact; an i32 value stored (an output) saturates, as a cast to i32 does.
  TensorMap out;
  for (const ir::Output& o : d.outputs) {
    Tensor t = values.value()[static_cast<std::size_t>(o.node)].permuted(o.axes);
    if (d.node(o.node).dtype == DType::i32)
      for (double& x : t.data) x = round_to_dtype(x, DType::i32);
    out.emplace(d.node(o.node).name, std::move(t));
  }
  return out;
}

}  // namespace napkin::reference
