// SPDX-License-Identifier: Apache-2.0
// Section numbers refer to docs/cost_model.md.
#include "cost/closed_form.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include <fmt/format.h>

namespace napkin::cost {

using ir::AxisId;
using ir::Diagram;
using ir::Node;
using ir::NodeId;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double monomial(const ClosedForm::Monomial& m, const std::vector<double>& x) {
  double e = 0;
  for (std::size_t a = 0; a < x.size(); ++a) e += m.exponents[a] * x[a];
  return m.coefficient * std::exp(e);
}

double sum_of(const std::vector<ClosedForm::Monomial>& ms, const std::vector<double>& x) {
  double s = 0;
  for (const auto& m : ms) s += monomial(m, x);
  return s;
}

// Shortest readable form of c as k * (product of axis sizes)^(+-1), e.g. "1/(2*d)".
std::string symbolic(double c, const Diagram& d, const std::vector<std::string>& exclude) {
  std::vector<std::pair<std::string, double>> axes;
  for (const ir::Axis& a : d.axes)
    if (std::find(exclude.begin(), exclude.end(), a.name) == exclude.end() && a.size > 1)
      axes.emplace_back(a.name, static_cast<double>(a.size));
  const std::size_t n = std::min<std::size_t>(axes.size(), 6);
  std::string best;
  int best_cost = 1 << 30;
  std::vector<int> p(n, 0);
  const int combos = static_cast<int>(std::pow(3, n));
  for (int code = 0; code < combos; ++code) {
    int x = code, cost = 0;
    double prod = 1;
    for (std::size_t i = 0; i < n; ++i) {
      p[i] = x % 3 - 1;
      x /= 3;
      prod *= std::pow(axes[i].second, p[i]);
      cost += p[i] != 0;
    }
    for (int k = 1; k <= 8; ++k)
      for (int inverse = 0; inverse < 2; ++inverse) {
        const double value = inverse ? prod / k : prod * k;
        if (std::fabs(value - c) > 1e-6 * std::fabs(c)) continue;
        const int total = cost * 2 + (k > 1);
        if (total >= best_cost) continue;
        std::string num, den;
        if (k > 1) (inverse ? den : num) = std::to_string(k);
        for (std::size_t i = 0; i < n; ++i) {
          std::string& side = p[i] > 0 ? num : den;
          if (p[i] != 0) side += (side.empty() ? "" : "*") + axes[i].first;
        }
        std::string text = num.empty() ? "1" : num;
        if (!den.empty()) text += "/" + (den.find('*') != std::string::npos ? "(" + den + ")" : den);
        best = text;
        best_cost = total;
      }
  }
  return best;
}

std::string power_of_m(double exponent) {
  if (std::fabs(exponent - 1) < 1e-6) return "M";
  if (std::fabs(exponent - 0.5) < 1e-6) return "M^(1/2)";
  if (std::fabs(exponent) < 1e-6) return "1";
  return fmt::format("M^{:.4g}", exponent);
}

// Snaps to a multiple of 1/12 when within numerical noise (betas are small rationals).
double snap(double v) {
  const double r = std::round(v * 12) / 12;
  return (std::fabs(v - r) < 1e-6 ? r : v) + 0.0;  // + 0.0: no negative zero
}

}  // namespace

std::vector<double> ClosedForm::optimal_log_tiles(double memory_values) const {
  const std::size_t n = axis_sizes.size();
  std::vector<double> x(n, 0.0);
  if (n == 0 || sum_of(memory_terms, x) > memory_values) return x;
  const double hi = std::log(memory_values) + 1;
  // The largest x_b keeping the memory within M (memory grows with every tile); -inf when
  // even x_b = 0 does not fit.
  auto max_feasible = [&](std::vector<double> y, std::size_t b) {
    y[b] = 0;
    if (sum_of(memory_terms, y) > memory_values * (1 + 1e-12)) return -kInf;
    double lo = 0, up = hi;
    for (int it = 0; it < 200; ++it) {
      const double mid = 0.5 * (lo + up);
      y[b] = mid;
      (sum_of(memory_terms, y) <= memory_values ? lo : up) = mid;
    }
    return lo;
  };
  double best = sum_of(transfer_terms, x);
  for (int round = 0; round < 100; ++round) {
    const double before = best;
    for (std::size_t a = 0; a < n; ++a) {
      x[a] = max_feasible(x, a);
      best = sum_of(transfer_terms, x);
    }
    // Trade memory between two tiles along the constraint (golden-section search).
    for (std::size_t a = 0; a < n; ++a)
      for (std::size_t b = 0; b < n; ++b) {
        if (a == b) continue;
        auto cost = [&](double t, std::vector<double>* out) {
          std::vector<double> y = x;
          y[a] = x[a] + t;
          if (y[a] < 0) return kInf;
          y[b] = max_feasible(y, b);
          if (y[b] == -kInf) return kInf;
          if (out) *out = y;
          return sum_of(transfer_terms, y);
        };
        double lo = -x[a], up = hi - x[a];
        const double phi = 0.5 * (std::sqrt(5.0) - 1);
        double c1 = up - phi * (up - lo), c2 = lo + phi * (up - lo);
        double f1 = cost(c1, nullptr), f2 = cost(c2, nullptr);
        for (int it = 0; it < 120; ++it) {
          if (f1 < f2) {
            up = c2;
            c2 = c1;
            f2 = f1;
            c1 = up - phi * (up - lo);
            f1 = cost(c1, nullptr);
          } else {
            lo = c1;
            c1 = c2;
            f1 = f2;
            c2 = lo + phi * (up - lo);
            f2 = cost(c2, nullptr);
          }
        }
        std::vector<double> y;
        const double f = cost(0.5 * (lo + up), &y);
        if (f < best) {
          best = f;
          x = y;
        }
      }
    if (before - best <= 1e-15 * before) break;
  }
  return x;
}

double ClosedForm::transfers(double memory_values) const {
  double h = 0;
  for (const Term& t : terms) h += t.alpha * std::pow(memory_values, -t.beta);
  return h;
}

double ClosedForm::alpha_for(double beta) const {
  double a = 0;
  for (const Term& t : terms)
    if (std::fabs(t.beta - beta) < 1e-6) a += t.alpha;
  return a;
}

std::string ClosedForm::text() const {
  std::vector<double> betas;
  for (const Term& t : terms)
    if (std::none_of(betas.begin(), betas.end(), [&](double b) { return std::fabs(b - t.beta) < 1e-6; }))
      betas.push_back(t.beta);
  std::sort(betas.begin(), betas.end());
  std::string s = "H*(M) =";
  for (std::size_t i = 0; i < betas.size(); ++i) {
    s += i ? " + " : " ";
    s += fmt::format("{:.6g}", alpha_for(betas[i]));
    if (betas[i] != 0) s += fmt::format("*M^-{:.4g}", betas[i]);
  }
  return s;
}

ClosedForm derive_closed_form(const Diagram& d_in, const sched::StreamingReport& report) {
  const Diagram& d = report.normalised.diagram;
  ClosedForm f;
  std::vector<NodeId> crossing = d.inputs();
  for (const ir::Output& o : d.outputs)
    if (std::find(crossing.begin(), crossing.end(), o.node) == crossing.end()) crossing.push_back(o.node);
  auto has = [&](NodeId t, AxisId a) {
    const auto& ax = d.node(t).axes;
    return std::find(ax.begin(), ax.end(), a) != ax.end();
  };
  std::vector<AxisId> tiled, woven, streamed;
  for (const sched::AxisStreaming& as : report.axes) {
    if (as.kind == sched::AxisKind::woven) woven.push_back(as.axis);
    if (as.kind == sched::AxisKind::streamed) streamed.push_back(as.axis);
    if (as.kind == sched::AxisKind::woven &&
        std::any_of(crossing.begin(), crossing.end(), [&](NodeId t) { return !has(t, as.axis); }))
      tiled.push_back(as.axis);
  }
  for (AxisId a : tiled) {
    f.tiled_axes.push_back(d.axis(a).name);
    f.axis_sizes.push_back(static_cast<double>(d.axis(a).size));
  }
  // §7 Transfers: |t| times the number of tiles of every tiled axis t lacks.
  for (NodeId t : crossing) {
    ClosedForm::Monomial m{static_cast<double>(d.elements(d.node(t).axes)), std::vector<int>(tiled.size(), 0)};
    Term term;
    term.tensor = d.node(t).name;
    for (AxisId a : d.node(t).axes) term.axes.push_back(d.axis(a).name);
    for (std::size_t i = 0; i < tiled.size(); ++i)
      if (!has(t, tiled[i])) {
        m.coefficient *= f.axis_sizes[i];
        m.exponents[i] = -1;
        term.reread_axes.push_back(d.axis(tiled[i]).name);
      }
    f.transfer_terms.push_back(m);
    f.terms.push_back(term);
    // Memory: tensors lacking every streamed axis stay for a whole group; woven axes that
    // are not worth tiling take tile 1, the others their full size.
    const bool resident = std::none_of(streamed.begin(), streamed.end(), [&](AxisId a) { return has(t, a); });
    if (!resident) continue;
    f.resident.push_back(d.node(t).name);
    ClosedForm::Monomial mem{1.0, std::vector<int>(tiled.size(), 0)};
    for (AxisId a : d.node(t).axes) {
      const auto ti = std::find(tiled.begin(), tiled.end(), a);
      if (ti != tiled.end()) mem.exponents[static_cast<std::size_t>(ti - tiled.begin())] = 1;
      else if (std::find(woven.begin(), woven.end(), a) == woven.end())
        mem.coefficient *= static_cast<double>(d.axis(a).size);
    }
    f.memory_terms.push_back(mem);
  }
  for (const Node& n : d.nodes)
    if (n.op == ir::OpKind::contract) {
      double loop = static_cast<double>(d.elements(n.axes));
      for (AxisId a : n.over) loop *= static_cast<double>(d.axis(a).size);
      f.flops += 2 * loop;
      std::vector<std::string> names;
      for (AxisId a : n.axes) names.push_back(d.axis(a).name);
      for (AxisId a : n.over) names.push_back(d.axis(a).name);
      f.contraction_loops.push_back(names);
    }
  // §7 beta and alpha of each term, read off the optimum at two memory sizes far above the
  // smallest feasible one (where no tile is pinned at 1 by accident of the constraint).
  const double m0 = std::max(1.0, sum_of(f.memory_terms, std::vector<double>(tiled.size(), 0.0)));
  const double m1 = m0 * 1e8, m2 = m1 * 16;
  const std::vector<double> x1 = f.optimal_log_tiles(m1), x2 = f.optimal_log_tiles(m2);
  for (std::size_t i = 0; i < f.terms.size(); ++i) {
    const double t1 = monomial(f.transfer_terms[i], x1), t2 = monomial(f.transfer_terms[i], x2);
    f.terms[i].beta = snap(-std::log(t2 / t1) / std::log(16.0));
    f.terms[i].alpha = t1 * std::pow(m1, f.terms[i].beta);
  }
  for (std::size_t i = 0; i < tiled.size(); ++i) {
    TileRelation r;
    r.axis = f.tiled_axes[i];
    r.exponent = snap((x2[i] - x1[i]) / std::log(16.0));
    r.coefficient = std::exp(x1[i]) / std::pow(m1, r.exponent);
    const std::string c = symbolic(r.coefficient, d_in, f.tiled_axes);
    const std::string mpow = power_of_m(r.exponent);
    if (r.exponent == 0) r.text = fmt::format("g_{} = 1 (tiling it does not reduce transfers)", r.axis);
    else if (c == "1") r.text = fmt::format("g_{} = {}", r.axis, mpow);
    else if (!c.empty() && c.rfind("1/", 0) == 0) r.text = fmt::format("g_{} = {}/{}", r.axis, mpow, c.substr(2));
    else if (!c.empty()) r.text = fmt::format("g_{} = {}*{}", r.axis, c, mpow);
    else r.text = fmt::format("g_{} = {:.6g}*{}", r.axis, r.coefficient, mpow);
    f.relations.push_back(r);
  }
  return f;
}

double multilevel_time_s(const ClosedForm& f, const std::vector<LevelRate>& levels) {
  double t = 0;
  for (const LevelRate& l : levels)
    if (l.values_per_s > 0) t += f.transfers(l.memory_values) / l.values_per_s;
  return t;
}

double transfer_bytes(const ClosedForm& f, double memory_bytes, double bytes_per_value) {
  return bytes_per_value * f.transfers(memory_bytes / bytes_per_value);
}

double cluster_time_s(const ClosedForm& f, double child_memory_values, int cluster_size,
                      double parent_values_per_s, double cross_values_per_s) {
  return (1 / parent_values_per_s - 1 / cross_values_per_s) *
             f.transfers(cluster_size * child_memory_values) +
         f.transfers(child_memory_values) / cross_values_per_s;
}

std::vector<Threshold> compute_bound_thresholds(const ClosedForm& f, const Diagram& d,
                                                double flops_per_s, double values_per_s) {
  std::vector<Threshold> out;
  if (f.flops <= 0) return out;
  const double ratio = flops_per_s / values_per_s;  // FLOPs the machine does per value moved
  std::vector<double> betas;
  for (const Term& t : f.terms)
    if (std::none_of(betas.begin(), betas.end(), [&](double b) { return std::fabs(b - t.beta) < 1e-6; }))
      betas.push_back(t.beta);
  std::sort(betas.begin(), betas.end());
  for (double beta : betas) {
    const double alpha = f.alpha_for(beta);
    if (beta > 0) {
      // alpha * M^-beta / K <= values_per_s / flops_per_s
      const double m = std::pow(alpha * ratio / f.flops, 1 / beta);
      out.push_back({"memory", m, fmt::format("M >= {:.6g} values for the M^-{:.4g} term", m, beta)});
    } else {
      // K / alpha_0 >= ratio. K and alpha_0 are sums of products of axis sizes; when their
      // ratio grows as exactly one axis (found by doubling each size in turn), name it.
      auto size_of = [&](const std::string& name, const std::string& doubled) {
        const double v = static_cast<double>(d.axis(*d.find_axis(name)).size);
        return name == doubled ? 2 * v : v;
      };
      auto ratio_with = [&](const std::string& doubled) {
        double k = 0, a0 = 0;
        for (const auto& loop : f.contraction_loops) {
          double x = 2;
          for (const auto& n : loop) x *= size_of(n, doubled);
          k += x;
        }
        for (const Term& t : f.terms) {
          if (std::fabs(t.beta - beta) > 1e-6) continue;
          double x = 1;
          for (const auto& n : t.axes) x *= size_of(n, doubled);
          a0 += x;
        }
        return k / a0;
      };
      const double r = ratio_with("");
      std::string axis;
      int growing = 0;
      for (const ir::Axis& a : d.axes) {
        const double e = std::log2(ratio_with(a.name) / r);
        if (std::fabs(e) < 1e-9) continue;
        ++growing;
        if (std::fabs(e - 1) < 1e-9) axis = a.name;
      }
      if (growing == 1 && !axis.empty()) {
        const double k = r / static_cast<double>(d.axis(*d.find_axis(axis)).size);
        out.push_back({"axis", ratio / k,
                       fmt::format("{} >= {:.6g} (the M-independent terms move 1/({:.6g}*{}) values per FLOP)",
                                   axis, ratio / k, k, axis)});
        continue;
      }
        out.push_back({"axis", ratio, fmt::format("FLOPs per value of the M-independent terms >= {:.6g} (now {:.6g})", ratio, r)});
    }
  }
  // Tiles: with every re-read tile equal to g, the tile-dependent terms must keep up.
  std::vector<const ClosedForm::Monomial*> dependent;
  for (const auto& m : f.transfer_terms)
    if (std::any_of(m.exponents.begin(), m.exponents.end(), [](int e) { return e != 0; })) dependent.push_back(&m);
  if (!dependent.empty()) {
    auto per_flop = [&](double g) {
      double s = 0;
      for (const auto* m : dependent) {
        int k = 0;
        for (int e : m->exponents) k -= e;
        s += m->coefficient * std::pow(g, -k);
      }
      return s / f.flops;
    };
    double lo = 1, hi = 1e15;
    if (per_flop(lo) <= 1 / ratio) hi = lo;
    for (int it = 0; it < 200 && hi > lo * (1 + 1e-12); ++it) {
      const double mid = std::sqrt(lo * hi);
      (per_flop(mid) <= 1 / ratio ? hi : lo) = mid;
    }
    std::string names;
    for (std::size_t i = 0; i < f.tiled_axes.size(); ++i)
      names += (i ? " = g_" : "g_") + f.tiled_axes[i];
    out.push_back({"tile", hi, fmt::format("{} >= {:.6g} (re-reads of the broadcast inputs)", names, hi)});
  }
  return out;
}

}  // namespace napkin::cost
