// SPDX-License-Identifier: Apache-2.0
#include "search/search.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

namespace napkin::search {

std::string reason_class(const std::string& reason) {
  const auto colon = reason.find(':');
  std::string cls = reason.substr(0, colon);
  if (cls.find("warpgroups") != std::string::npos) cls = "warpgroups";
  if (cls.find("pingpong") != std::string::npos) cls = "overlap";
  return cls;
}

namespace {

std::string summary(const ir::Diagram& d, const Config& c, int n) {
  (void)d;
  return fmt::format("w={} s={} N={} stages={} {}", c.rows_per_warpgroup, c.chunk, n, c.stages,
                     overlap_name(c.overlap));
}

Result<SearchResult> solver_search(const ir::Diagram& d, const sched::StreamingReport& report,
                                   const arch::Machine& m, const SearchOptions& o) {
  SearchResult r;
  r.method = "configuration solver";
  for (std::int64_t w : o.rows)
    for (std::int64_t s : o.chunks)
      for (int n : o.warpgroups)
        for (int st : o.stages)
          for (Overlap ov : o.overlaps) {
            Config c;
            c.rows_per_warpgroup = w;
            c.chunk = s;
            c.warpgroups = n;
            c.stages = st;
            c.overlap = ov;
            c.overhead = o.overhead;
            c.accumulator_dtype = o.accumulator_dtype;
            c.subloops = o.subloops;
            c.row_layout = o.row_layout;
            ++r.considered;
            auto conf = configure(d, report, m, c);
            if (!conf) return conf.error();
            const std::string line = summary(d, c, n);
            if (conf->rejection) {
              ++r.rejected[reason_class(*conf->rejection)];
              r.rejections.push_back({line, *conf->rejection});
              continue;
            }
            Ranked k;
            k.schedule = conf->schedule;
            k.predicted_time_s = conf->predicted_time_s;
            k.bound = conf->efficiency < 1 - 1e-9 ? std::string("overlap (") + std::string(overlap_name(ov)) + ")"
                                                   : conf->bound_unit;
            if (!conf->compute_bound && conf->period_clk_per_row > conf->tensor_clk_per_row)
              k.bound = std::string("transfer ") + std::string(conf->transfer_link());
            if (conf->bound_by_compulsory()) k.bound = "HBM bandwidth (each input read once, each output written once)";
            k.groups_per_sm = conf->warpgroups;
            k.summary = line;
            for (const Divisibility& dv : conf->divisibility)
              if (dv.padded_from > 0) k.summary += fmt::format(" ({} = {} padded to {})", dv.what, dv.padded_from, dv.value);
            k.configuration = std::move(conf.value());
            r.ranked.push_back(std::move(k));
          }
  return r;
}

// Diagrams of another shape: candidate schedules through the cost model.
Result<SearchResult> schedule_search(const ir::Diagram& d, const sched::StreamingReport& report,
                                     const arch::Machine& m) {
  SearchResult r;
  r.method = "cost model over schedules";
  const sched::Schedule default_base = cost::default_schedule(d, report, m);
  // The executor and the kernels carry accumulators along one streamed axis: where the default
  // streams several (attention whose V has a head dim of its own also streams Q K's d), each
  // base streams one of them and keeps the others whole.
  std::set<std::string> carrying;
  for (const auto& l : default_base.levels)
    for (const auto& st : l.streams)
      if (!st.accumulators.empty()) carrying.insert(st.axis);
  std::vector<sched::Schedule> bases;
  if (carrying.size() <= 1) bases.push_back(default_base);
  else for (const std::string& kept : carrying) {
    sched::Schedule b = default_base;
    for (auto& l : b.levels)
      std::erase_if(l.streams, [&](const auto& st) { return !st.accumulators.empty() && st.axis != kept; });
    bases.push_back(std::move(b));
  }
  std::set<std::string> seen;  // clamping to small axes makes some candidates the same schedule
  for (const sched::Schedule& base : bases)
  for (std::int64_t tile : {16, 32, 64, 128, 256})
    for (std::int64_t chunk : {32, 64, 128})
      for (int stages : {1, 2, 3, 4}) {
        sched::Schedule s = base;
        for (auto& l : s.levels) {
          if (l.level == arch::kL2) continue;
          for (auto& t : l.tiles)
            if (t.tile > 1) t.tile = std::min(tile, d.axis(*d.find_axis(t.axis)).size);
          for (auto& st : l.streams) st.chunk = std::min(chunk, d.axis(*d.find_axis(st.axis)).size);
          if (l.level == arch::kSmem) l.stages = stages;
        }
        // The l2 group holds whole smem groups: an l2 tile smaller than the smem tile cut from it
        // grows to it (the l2 capacity check below then decides).
        if (const sched::LevelSchedule* smem = s.find(arch::kSmem))
          for (auto& l2 : s.levels)
            if (l2.level == arch::kL2)
              for (const auto& t : smem->tiles)
                for (auto& u : l2.tiles)
                  if (u.axis == t.axis) u.tile = std::max(u.tile, t.tile);
        const std::string line = sched::to_string(s);
        if (!seen.insert(line).second) continue;
        ++r.considered;
        if (auto invalid = sched::validate_schedule(s, d)) {  // never rank what analyze would refuse
          ++r.rejected["invalid"];
          r.rejections.push_back({line, invalid->message});
          continue;
        }
        auto e = cost::estimate(d, s, m);
        if (!e) return e.error();
        std::string why;
        for (const auto& lc : e->levels)
          if (lc.scheduled && lc.peak_bytes > lc.capacity_bytes && why.empty())
            why = fmt::format("{}: one group needs {:.1f} KiB, the machine has {:.1f} KiB", lc.name,
                              lc.peak_bytes / 1024, lc.capacity_bytes / 1024);
        if (!why.empty()) {
          ++r.rejected[reason_class(why)];
          r.rejections.push_back({line, why});
          continue;
        }
        Ranked k;
        k.schedule = s;
        k.predicted_time_s = e->predicted_time_s;
        k.tflops = e->tflops();
        k.bound = e->bound;
        k.summary = line;
        r.ranked.push_back(std::move(k));
      }
  return r;
}

}  // namespace

Result<SearchResult> search(const ir::Diagram& d, const sched::StreamingReport& report,
                            const arch::Machine& m, const SearchOptions& options) {
  int streamed = 0, rows = 0;
  for (const auto& a : report.axes) {
    streamed += a.kind == sched::AxisKind::streamed && !kept_whole(report, a);
    rows += a.kind == sched::AxisKind::woven && !a.broadcast_inputs.empty();
  }
  // The solver's model is attention's: a contraction makes the streamed tile, the code between
  // feeds a second one over the streamed axis. A single contraction streaming a plain sum (a
  // matmul's K) is the GEMM family's (plan's solver); a plain sum after a first contraction
  // (sigmoid or ReLU attention: no softmax) is attention's.
  const auto contractions = std::count_if(report.normalised.diagram.nodes.begin(), report.normalised.diagram.nodes.end(),
                                          [](const ir::Node& n) { return n.op == ir::OpKind::contract; });
  const bool solver = streamed == 1 && rows >= 1 && m.limits.warpgroup_size_threads.has_value() &&
                      (contractions >= 2 ||
                       std::none_of(report.axes.begin(), report.axes.end(), [&](const sched::AxisStreaming& a) {
                         return a.kind == sched::AxisKind::streamed && !kept_whole(report, a) &&
                                std::count(a.accumulators.begin(), a.accumulators.end(), sched::Accumulator::add) &&
                                a.accumulators.size() == 1;
                       }));
  auto r = solver ? solver_search(d, report, m, options) : schedule_search(d, report, m);
  if (!r) return r;
  double flops = 0;
  for (const ir::Node& n : report.normalised.diagram.nodes)
    if (n.op == ir::OpKind::contract) {
      double loop = static_cast<double>(report.normalised.diagram.elements(n.axes));
      for (ir::AxisId a : n.over) loop *= static_cast<double>(d.axis(a).size);
      flops += 2 * loop;
    }
  // TFLOP/s of the work done: blocks a mask skips are not computed. (A cost-model schedule's
  // TFLOP/s is its estimate's already, over the blocks it visits: kept.)
  for (Ranked& k : r->ranked) {
    if (k.configuration && k.predicted_time_s > 0)
      k.tflops = flops * k.configuration->visited_fraction / k.predicted_time_s / 1e12;
  }
  std::stable_sort(r->ranked.begin(), r->ranked.end(),
                   [](const Ranked& a, const Ranked& b) { return a.predicted_time_s < b.predicted_time_s; });
  return r;
}

}  // namespace napkin::search
