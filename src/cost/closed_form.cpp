// SPDX-License-Identifier: Apache-2.0
// Section numbers refer to docs/cost_model.md.
#include "cost/closed_form.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace napkin::cost {

using ir::AxisId;
using ir::Diagram;
using ir::Node;
using ir::NodeId;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The optimisation works on the groups' log tiles x (ClosedForm::groups), in log space: a
// monomial c * prod_a g_a^e_a is log c + sum_g e_g x_g, and a sum of them a log-sum-exp, so no
// M overflows or underflows.
struct LogMonomial {
  double log_coefficient = 0;
  std::vector<int> exponents;  // per group
};

LogMonomial grouped(const ClosedForm::Monomial& m, const std::vector<std::vector<std::size_t>>& groups) {
  LogMonomial g{std::log(m.coefficient), {}};
  for (const auto& members : groups) g.exponents.push_back(m.exponents[members.front()]);
  return g;
}

double log_of(const LogMonomial& m, const std::vector<double>& x) {
  double e = m.log_coefficient;
  for (std::size_t a = 0; a < x.size(); ++a) e += m.exponents[a] * x[a];
  return e;
}

double log_sum_exp(const std::vector<double>& v) {
  if (v.empty()) return -kInf;
  const double top = *std::max_element(v.begin(), v.end());
  if (top == -kInf) return -kInf;
  double s = 0;
  for (double x : v) s += std::exp(x - top);
  return top + std::log(s);
}

// log of the sum of the monomials (only those whose exponent on group `only` is `sign`, when
// `only` is given), and the weighted mean exponent of each group over them (the gradient of
// that log with respect to x).
struct LogSum {
  double value = -kInf;
  std::vector<double> gradient;
};
LogSum log_sum(const std::vector<LogMonomial>& ms, const std::vector<double>& x, int only = -1, int sign = 0) {
  std::vector<double> logs;
  std::vector<const LogMonomial*> used;
  for (const LogMonomial& m : ms)
    if (only < 0 || m.exponents[static_cast<std::size_t>(only)] == sign) {
      logs.push_back(log_of(m, x));
      used.push_back(&m);
    }
  LogSum r;
  r.value = log_sum_exp(logs);
  r.gradient.assign(x.size(), 0.0);
  if (r.value == -kInf) return r;
  for (std::size_t i = 0; i < used.size(); ++i) {
    const double w = std::exp(logs[i] - r.value);
    for (std::size_t a = 0; a < x.size(); ++a) r.gradient[a] += w * used[i]->exponents[a];
  }
  return r;
}

double log_sum_of(const std::vector<LogMonomial>& ms, const std::vector<double>& x) {
  std::vector<double> logs;
  for (const LogMonomial& m : ms) logs.push_back(log_of(m, x));
  return log_sum_exp(logs);
}

// Solves a x = b in place (Gaussian elimination, partial pivoting); false when singular.
bool solve(std::vector<std::vector<double>> a, std::vector<double>& b) {
  const std::size_t n = b.size();
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t p = c;
    for (std::size_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    if (std::fabs(a[p][c]) < 1e-12) return false;
    std::swap(a[p], a[c]);
    std::swap(b[p], b[c]);
    for (std::size_t r = c + 1; r < n; ++r) {
      const double f = a[r][c] / a[c][c];
      for (std::size_t k = c; k < n; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  for (std::size_t c = n; c-- > 0;) {
    for (std::size_t k = c + 1; k < n; ++k) b[c] -= a[c][k] * b[k];
    b[c] /= a[c][c];
  }
  return true;
}

// Newton's method on the optimality conditions of min T(x) s.t. S(x) = M over the groups with
// x > 0 (the others stay at the bound x = 0): for each such group a,
//   log(-dT/dx_a) - mu - log(dS/dx_a) = 0   (the Lagrange condition, mu = log of the multiplier)
// and log S(x) = log M. Exponents are -1/0 in T and 0/1 in S, so -dT/dx_a is the sum of the
// transfer monomials lacking a, dS/dx_a that of the memory monomials holding it. Polishes the
// search's optimum to machine precision; returns x unchanged when the conditions do not apply
// (a group with no memory or transfer monomial) or Newton does not converge to a better point.
std::vector<double> newton_polish(const std::vector<LogMonomial>& transfer, const std::vector<LogMonomial>& memory,
                                  std::vector<double> x, double log_memory) {
  const std::size_t n = x.size();
  const double start_objective = log_sum_of(transfer, x);
  std::vector<bool> active(n);
  for (std::size_t a = 0; a < n; ++a) active[a] = x[a] > 1e-7;
  for (std::size_t attempt = 0; attempt <= n; ++attempt) {
    std::vector<std::size_t> free;
    for (std::size_t a = 0; a < n; ++a)
      if (active[a]) free.push_back(a);
    if (free.empty()) return x;
    std::vector<double> y = x;
    for (std::size_t a = 0; a < n; ++a)
      if (!active[a]) y[a] = 0;
    // Residuals and Jacobian over (x_free, mu).
    auto system = [&](const std::vector<double>& z, double mu, std::vector<double>& g,
                      std::vector<std::vector<double>>* jac) {
      const std::size_t k = free.size();
      g.assign(k + 1, 0.0);
      if (jac) jac->assign(k + 1, std::vector<double>(k + 1, 0.0));
      for (std::size_t i = 0; i < k; ++i) {
        const int a = static_cast<int>(free[i]);
        const LogSum t = log_sum(transfer, z, a, -1), m = log_sum(memory, z, a, 1);
        if (t.value == -kInf || m.value == -kInf) return false;
        g[i] = t.value - mu - m.value;
        if (jac) {
          for (std::size_t j = 0; j < k; ++j) (*jac)[i][j] = t.gradient[free[j]] - m.gradient[free[j]];
          (*jac)[i][k] = -1;
        }
      }
      const LogSum all = log_sum(memory, z);
      g[k] = all.value - log_memory;
      if (jac)
        for (std::size_t j = 0; j < k; ++j) (*jac)[k][j] = all.gradient[free[j]];
      return true;
    };
    auto norm = [](const std::vector<double>& g) {
      double s = 0;
      for (double v : g) s = std::max(s, std::fabs(v));
      return s;
    };
    std::vector<double> g;
    if (!system(y, 0, g, nullptr)) return x;
    double mu = 0;  // the mean of the Lagrange conditions' imbalance
    for (std::size_t i = 0; i + 1 < g.size(); ++i) mu += g[i] / static_cast<double>(free.size());
    std::vector<std::vector<double>> jac;
    system(y, mu, g, &jac);
    bool converged = false;
    for (int it = 0; it < 60 && !converged; ++it) {
      std::vector<double> step = g;
      for (double& v : step) v = -v;
      if (!solve(jac, step)) return x;
      const double before = norm(g);
      double scale = 1;
      for (; scale > 1e-6; scale /= 2) {
        std::vector<double> z = y;
        for (std::size_t i = 0; i < free.size(); ++i) z[free[i]] += scale * step[i];
        std::vector<double> h;
        if (system(z, mu + scale * step.back(), h, nullptr) && norm(h) < before) {
          y = z;
          mu += scale * step.back();
          break;
        }
      }
      if (scale <= 1e-6) break;
      system(y, mu, g, &jac);
      converged = norm(g) < 1e-13 * std::max(1.0, std::fabs(log_memory));
    }
    if (!converged) return x;
    // A group driven below the bound is not free after all: hold it at x = 0 and solve again.
    std::size_t lowest = n;
    for (std::size_t a : free)
      if (y[a] < 0 && (lowest == n || y[a] < y[lowest])) lowest = a;
    if (lowest != n) {
      active[lowest] = false;
      continue;
    }
    if (log_sum_of(transfer, y) > start_objective + 1e-9) return x;
    return y;
  }
  return x;
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

// v as the nearest rational of denominator <= 24 when within numerical noise (exponents of a
// geometric program with 0/1 exponents are small rationals), else as it is.
double snap(double v) {
  for (int den = 1; den <= 24; ++den) {
    const double r = std::round(v * den) / den;
    if (std::fabs(v - r) < 1e-6) return r + 0.0;  // + 0.0: no negative zero
  }
  return v;
}

std::string power_of_m(double exponent) {
  if (std::fabs(exponent - 1) < 1e-9) return "M";
  if (std::fabs(exponent) < 1e-9) return "1";
  for (int den = 2; den <= 24; ++den) {
    const double num = std::round(exponent * den);
    if (std::fabs(exponent * den - num) < 1e-9 && std::gcd(static_cast<long>(num), static_cast<long>(den)) == 1)
      return fmt::format("M^({}/{})", static_cast<long>(num), den);
  }
  return fmt::format("M^{:.4g}", exponent);
}

}  // namespace

std::vector<double> ClosedForm::optimal_log_tiles(double log_memory_values) const {
  const std::size_t n = groups.size();
  std::vector<double> x(n, 0.0);
  std::vector<LogMonomial> transfer, memory;
  for (const Monomial& m : transfer_terms) transfer.push_back(grouped(m, groups));
  for (const Monomial& m : memory_terms) memory.push_back(grouped(m, groups));
  const double log_m = log_memory_values;
  if (n == 0 || log_sum_of(memory, x) > log_m) return x;
  const double hi = log_m + 1;
  // The largest x_b keeping the memory within M (memory grows with every tile); -inf when
  // even x_b = 0 does not fit.
  auto max_feasible = [&](std::vector<double> y, std::size_t b) {
    y[b] = 0;
    if (log_sum_of(memory, y) > log_m + 1e-12) return -kInf;
    double lo = 0, up = hi;
    for (int it = 0; it < 200; ++it) {
      const double mid = 0.5 * (lo + up);
      y[b] = mid;
      (log_sum_of(memory, y) <= log_m ? lo : up) = mid;
    }
    return lo;
  };
  double best = log_sum_of(transfer, x);
  for (int round = 0; round < 100; ++round) {
    const double before = best;
    for (std::size_t a = 0; a < n; ++a) {
      x[a] = max_feasible(x, a);
      best = log_sum_of(transfer, x);
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
          return log_sum_of(transfer, y);
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
    if (before - best <= 1e-15 * std::max(1.0, std::fabs(before))) break;
  }
  return newton_polish(transfer, memory, x, log_m);
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
  // One term per beta: betas are exact rationals, so equal ones compare equal (1e-6 guards a
  // beta the fit could not snap).
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
  // Tiled axes with equal exponents in every monomial matter only through their product: one
  // variable each (else the optimum is a whole line, and a fit through it is noise).
  for (std::size_t i = 0; i < tiled.size(); ++i) {
    auto column = [&](std::size_t a) {
      std::vector<int> c;
      for (const auto& m : f.transfer_terms) c.push_back(m.exponents[a]);
      for (const auto& m : f.memory_terms) c.push_back(m.exponents[a]);
      return c;
    };
    auto same = std::find_if(f.groups.begin(), f.groups.end(), [&](const auto& g) { return column(g.front()) == column(i); });
    if (same != f.groups.end()) same->push_back(i);
    else f.groups.push_back({i});
  }
  // §7 beta and alpha of each term, read off the optimum at two memory sizes far above the
  // smallest feasible one (10^40 and 10^50 times it, in log space: the asymptotic form, with
  // no tile pinned at 1 by accident of the constraint and every lower-order memory term
  // negligible), then snapped: beta and the tiles' exponents are small rationals.
  std::vector<LogMonomial> transfer;
  for (const auto& m : f.transfer_terms) transfer.push_back(grouped(m, f.groups));
  std::vector<LogMonomial> memory;
  for (const auto& m : f.memory_terms) memory.push_back(grouped(m, f.groups));
  const double log_m0 = std::max(0.0, log_sum_of(memory, std::vector<double>(f.groups.size(), 0.0)));
  const double log_m1 = log_m0 + 40 * std::log(10.0), log_m2 = log_m1 + 10 * std::log(10.0);
  const std::vector<double> x1 = f.optimal_log_tiles(log_m1), x2 = f.optimal_log_tiles(log_m2);
  for (std::size_t i = 0; i < f.terms.size(); ++i) {
    const double t1 = log_of(transfer[i], x1), t2 = log_of(transfer[i], x2);
    f.terms[i].beta = snap(-(t2 - t1) / (log_m2 - log_m1));
    f.terms[i].alpha = std::exp(t1 + f.terms[i].beta * log_m1);
  }
  for (std::size_t g = 0; g < f.groups.size(); ++g) {
    TileRelation r;
    std::string lhs;
    for (std::size_t a : f.groups[g]) {
      r.axes.push_back(f.tiled_axes[a]);
      r.axis += (r.axis.empty() ? "" : "*") + f.tiled_axes[a];
      lhs += (lhs.empty() ? "g_" : "*g_") + f.tiled_axes[a];
    }
    r.exponent = snap((x2[g] - x1[g]) / (log_m2 - log_m1));
    r.coefficient = std::exp(x1[g] - r.exponent * log_m1);
    const std::string c = symbolic(r.coefficient, d_in, f.tiled_axes);
    const std::string mpow = power_of_m(r.exponent);
    const std::string product = r.axes.size() > 1 ? " (only the product matters)" : "";
    if (r.exponent == 0) r.text = fmt::format("{} = 1 (tiling it does not reduce transfers)", lhs);
    else if (c == "1") r.text = fmt::format("{} = {}{}", lhs, mpow, product);
    else if (!c.empty() && c.rfind("1/", 0) == 0) r.text = fmt::format("{} = {}/{}{}", lhs, mpow, c.substr(2), product);
    else if (!c.empty()) r.text = fmt::format("{} = {}*{}{}", lhs, c, mpow, product);
    else r.text = fmt::format("{} = {:.6g}*{}{}", lhs, r.coefficient, mpow, product);
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
