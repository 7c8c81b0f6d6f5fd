// SPDX-License-Identifier: Apache-2.0
// Section numbers refer to docs/configuration.md.
#include "search/configure.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "ir/builder.h"
#include "napkin/attention_schedule.h"  // runtime/include: the device library's split rule
#include "sched/skip.h"
#include "search/kernel_solver.h"  // kKernelFixedS

namespace napkin::search {

using ir::AxisId;
using ir::Diagram;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

std::string_view row_layout_name(RowLayout r) { return r == RowLayout::quad ? "quad" : "thread"; }

std::optional<RowLayout> parse_row_layout(std::string_view name) {
  if (name == "thread") return RowLayout::thread;
  if (name == "quad") return RowLayout::quad;
  return std::nullopt;
}


namespace {

bool has(const Node& n, AxisId a) { return std::find(n.axes.begin(), n.axes.end(), a) != n.axes.end(); }

bool narrow(DType t) { return is_float(t) && t != DType::f32 && t != DType::f64; }

// The structure the solver needs: one row axis (re-read: tiled per warpgroup), one streamed axis,
// batch axes (woven, tile 1) and whole axes (neither: kept entire, like d).
struct Shape {
  AxisId row = -1;
  std::vector<AxisId> batch, whole;
  AxisId stream = -1;
  std::vector<sched::Accumulator> accumulators;
  std::vector<bool> operand;  // per node: an input the tensor core reads (a contraction's operand)
};

// Inputs that the tensor core reads: those a contraction's operand is computed from, where that
// operand does not itself depend on a contraction (Q and K of S = Q K^T, V of P V, X and W of
// rmsnorm(X) W; not a mask, bias or per-head scalar applied to S on its way to P). The others
// ride along.
std::vector<bool> tensor_core_operands(const Diagram& d) {
  const std::size_t n_nodes = d.nodes.size();
  std::vector<bool> after_contraction(n_nodes, false), out(n_nodes, false);
  for (std::size_t i = 0; i < n_nodes; ++i)  // operands precede their users
    for (NodeId o : d.nodes[i].operands)
      if (d.node(o).op == OpKind::contract || after_contraction[static_cast<std::size_t>(o)]) after_contraction[i] = true;
  std::vector<NodeId> stack;
  std::vector<bool> seen(n_nodes, false);
  for (const Node& n : d.nodes)
    if (n.op == OpKind::contract)
      for (NodeId o : n.operands)
        if (d.node(o).op != OpKind::contract && !after_contraction[static_cast<std::size_t>(o)]) stack.push_back(o);
  while (!stack.empty()) {
    const NodeId x = stack.back();
    stack.pop_back();
    if (seen[static_cast<std::size_t>(x)]) continue;
    seen[static_cast<std::size_t>(x)] = true;
    if (d.node(x).op == OpKind::input) out[static_cast<std::size_t>(x)] = true;
    for (NodeId o : d.node(x).operands) stack.push_back(o);
  }
  return out;
}

Result<Shape> shape_of(const Diagram& d, const sched::StreamingReport& r) {
  Shape s;
  std::vector<AxisId> rows;  // the axes the streamed operands lack
  s.operand = tensor_core_operands(d);
  std::vector<std::string> streamed;
  for (const auto& a : r.axes)
    if (a.kind == sched::AxisKind::streamed && !kept_whole(r, a)) {
      s.stream = a.axis;
      s.accumulators = a.accumulators;
      streamed.push_back(d.axis(a.axis).name);
    }
  // The tensor-core operands that carry the streamed axis (K and V), by name.
  std::vector<std::string> streamed_operands;
  for (NodeId id : d.inputs())
    if (s.operand[static_cast<std::size_t>(id)] && has(d.node(id), s.stream)) streamed_operands.push_back(d.node(id).name);
  for (const auto& a : r.axes) {
    if (a.kind == sched::AxisKind::streamed) {
      if (a.axis != s.stream) s.whole.push_back(a.axis);
    } else if (a.kind == sched::AxisKind::woven) {
      // A row axis is one that the streamed tensor-core operands lack (K and V lack q: tiling q
      // saves their re-reads). One that only some of them lack is a whole axis: V's head dim of
      // its own (Q and K lack it), the output's columns. One that only a side input lacks (a
      // key-padding mask[b k] lacks h) is a batch axis: the side input is re-read per index, a
      // small cost, and the tiles stay those of the attention it decorates.
      const auto lacks = [&](const std::string& name) {
        return std::find(a.broadcast_inputs.begin(), a.broadcast_inputs.end(), name) != a.broadcast_inputs.end();
      };
      const auto n_lacking = std::count_if(streamed_operands.begin(), streamed_operands.end(), lacks);
      if (!streamed_operands.empty() && n_lacking == static_cast<std::ptrdiff_t>(streamed_operands.size())) rows.push_back(a.axis);
      else if (n_lacking > 0) s.whole.push_back(a.axis);
      else s.batch.push_back(a.axis);
    } else {
      s.whole.push_back(a.axis);
    }
  }
  if (streamed.size() != 1 || rows.empty())
    return plain_error(fmt::format(
        "the configuration solver needs one streamed axis and at least one re-read axis (rows), as in "
        "attention; {} has {} streamed ({}) and {} re-read",
        d.source_name, streamed.size(), fmt::join(streamed, " "), rows.size()));
  // The kernel tiles one row axis (napkin/attention_kernel.h: the query rows, or a GQA group's
  // heads where they outnumber the queries, as in decoding): the longest, the last of equals.
  // The others are batch axes, one element at a time (each head its own tiles, K and V read
  // again from L2).
  s.row = rows.front();
  for (AxisId a : rows)
    if (d.axis(a).size >= d.axis(s.row).size) s.row = a;
  for (AxisId a : rows)
    if (a != s.row) s.batch.push_back(a);
  return s;
}

std::string shape_text(const Diagram& d, const Node& n, const std::vector<std::pair<AxisId, std::int64_t>>& extents) {
  std::string s = "[";
  for (AxisId a : n.axes) {
    std::int64_t e = d.axis(a).size;
    for (const auto& [ax, v] : extents)
      if (ax == a) e = v;
    s += fmt::format("{}{}:{}", s.size() > 1 ? " " : "", d.axis(a).name, e);
  }
  return s + "]";
}

double elements(const Diagram& d, const Node& n, const std::vector<std::pair<AxisId, std::int64_t>>& extents) {
  double x = 1;
  for (AxisId a : n.axes) {
    std::int64_t e = d.axis(a).size;
    for (const auto& [ax, v] : extents)
      if (ax == a) e = v;
    x *= static_cast<double>(e);
  }
  return x;
}

bool is_output(const Diagram& d, NodeId id) {
  return std::any_of(d.outputs.begin(), d.outputs.end(), [&](const ir::Output& o) { return o.node == id; });
}

}  // namespace

bool kept_whole(const sched::StreamingReport& r, const sched::AxisStreaming& a) {
  const Diagram& dn = r.normalised.diagram;
  if (a.kind != sched::AxisKind::streamed) return false;
  if (a.accumulators != std::vector<sched::Accumulator>{sched::Accumulator::add} || a.folds.empty()) return false;
  for (NodeId f : a.folds) {
    const Node& n = dn.node(f);
    if (n.op != OpKind::contract) return false;
    for (NodeId o : n.operands)
      for (NodeId c = 0; c < o; ++c)
        if (dn.node(c).op == OpKind::contract && dn.depends_on(o, c)) return false;
  }
  for (const auto& b : r.axes) {
    if (b.axis == a.axis || b.kind != sched::AxisKind::streamed) continue;
    for (NodeId g : b.folds)
      for (NodeId f : a.folds)
        if (g != f && dn.depends_on(g, f)) return true;
  }
  return false;
}

std::string sharing_text(const Configuration& c) {
  if (c.ctas_sharing_chunk <= 1) return "one CTA per slice: no chunk is shared";
  return fmt::format("{:.0f} CTAs of a slice read each chunk together", c.ctas_sharing_chunk);
}

std::string bandwidth_verdict(const Configuration& c) {
  return c.compute_bound ? "compute-bound" : fmt::format("memory-bound ({})", c.transfer_link());
}

Result<Configuration> configure(const Diagram& d, const sched::StreamingReport& report,
                                const arch::Machine& m, const Config& c) {
  auto shape_r = shape_of(d, report);
  if (!shape_r) return shape_r.error();
  const Shape sh = shape_r.value();
  const Diagram& dn = report.normalised.diagram;
  Configuration out;
  out.config = c;
  const auto wg_threads = m.limits.warpgroup_size_threads;
  if (!wg_threads)
    return plain_error(fmt::format("machine {} has no warpgroups (wgmma needs sm_90 or later)", m.name));
  const double threads = static_cast<double>(wg_threads->value);
  const double clock = m.clock_hz.value, sms = static_cast<double>(m.sm_count.value);
  const std::string stream_name = d.axis(sh.stream).name;
  // Per-row extents: a row is one element of the row axis; the chunk of the streamed axis.
  std::vector<std::pair<AxisId, std::int64_t>> per_row{{sh.stream, c.chunk}};
  per_row.emplace_back(sh.row, 1);
  for (AxisId a : sh.batch) per_row.emplace_back(a, 1);
  const AxisId last_row = sh.row;
  const double last_per_wg = static_cast<double>(c.rows_per_warpgroup);
  std::vector<std::pair<AxisId, std::int64_t>> per_wg{{sh.stream, c.chunk}};
  for (AxisId a : sh.batch) per_wg.emplace_back(a, 1);
  per_wg.emplace_back(last_row, static_cast<std::int64_t>(std::max(1.0, last_per_wg)));
  auto reject = [&](std::string why) {
    if (!out.rejection) out.rejection = std::move(why);
  };

  // §1 Divisibility: WGMMA shapes (M = 64 per warpgroup, N % 8, K % 16 for 16-bit and % 32
  // for 8-bit operands), one row per thread (RowLayout::thread only), and 128-byte coalescing
  // of every input's contiguous axis, combined by LCM. A whole axis (d) is the diagram's, not a
  // choice: its tile is padded to what WGMMA needs (TMA fills zeros past the tensor), and a
  // tensor-core operand's rows are swizzled 128 bytes wide where the tile allows, else 64 or
  // 32; the one hard rule is TMA's 16-byte rows.
  Divisibility rows_div{"w_" + d.axis(last_row).name, 1, {}, c.rows_per_warpgroup};
  Divisibility chunk_div{"s_" + stream_name, 1, {}, c.chunk};
  std::vector<Divisibility> whole_div;
  for (AxisId a : sh.whole) whole_div.push_back({d.axis(a).name, 1, {}, d.axis(a).size});
  auto need = [](Divisibility& dv, std::int64_t k, std::string why) {
    dv.multiple = std::lcm(dv.multiple, k);
    dv.reasons.push_back(fmt::format("{} ({})", k, why));
  };
  auto whole_of = [&](AxisId a) -> Divisibility* {
    for (std::size_t i = 0; i < sh.whole.size(); ++i)
      if (sh.whole[i] == a) return &whole_div[i];
    return nullptr;
  };
  auto div_of = [&](AxisId a) -> Divisibility* {
    if (a == sh.stream) return &chunk_div;
    if (a == last_row) return &rows_div;
    return whole_of(a);
  };
  std::string box_too_wide;
  need(rows_div, 64, "WGMMA M = 64 per warpgroup");
  if (c.row_layout == RowLayout::thread)
    need(rows_div, static_cast<std::int64_t>(threads), "one row per thread of a warpgroup");
  for (const Node& n : dn.nodes) {
    if (n.op != OpKind::contract) continue;
    DType fmt_t = DType::f32;
    for (NodeId o : n.operands)
      if (narrow(dn.node(o).dtype)) fmt_t = dn.node(o).dtype;
    const std::int64_t k_mult = dtype_bytes(fmt_t) == 1 ? 32 : 16;
    for (AxisId a : n.over)
      if (auto* dv = div_of(a)) {
        need(*dv, k_mult, fmt::format("WGMMA K of a {} contraction", dtype_name(fmt_t)));
        // A whole axis summed by a contraction (Q's and K's head dim) is one TMA box's side
        // (judged after the WGMMA N rule below, the one to name where an axis is both).
        if (dv == whole_of(a) && d.axis(a).size > 256)
          box_too_wide = fmt::format("divisibility: {} = {} is kept whole in one TMA box, at most 256 along an axis",
                                     dv->what, d.axis(a).size);
      }
    for (AxisId a : n.axes)
      if (a != last_row && !std::count(sh.batch.begin(), sh.batch.end(), a))
        if (auto* dv = div_of(a)) {
          need(*dv, 8, "WGMMA N % 8");
          // A whole axis is one WGMMA's N (the accumulator's columns): at most 256.
          if (dv == whole_of(a) && d.axis(a).size > 256)
            reject(fmt::format("divisibility: {} = {} is a WGMMA's N, at most 256", dv->what, d.axis(a).size));
        }
  }
  if (!box_too_wide.empty()) reject(box_too_wide);
  for (Divisibility& dv : whole_div)
    if (dv.value % dv.multiple != 0) {
      dv.padded_from = dv.value;
      dv.value = (dv.value + dv.multiple - 1) / dv.multiple * dv.multiple;
    }
  for (NodeId id : d.inputs()) {
    const Node& n = d.node(id);
    if (n.axes.empty()) continue;
    const AxisId inner = n.axes.back();
    auto* dv = div_of(inner);
    if (!dv || dv == &rows_div) continue;
    const std::int64_t bytes = dtype_bytes(n.dtype), rows_of_16 = std::max<std::int64_t>(1, 16 / bytes);
    // The tensor core's operands move in 128-byte coalesced rows; a side input (a mask, a bias)
    // needs only TMA's 16-byte rows: its traffic is small beside K and V.
    if (!sh.operand[static_cast<std::size_t>(id)]) {
      need(*dv, rows_of_16, fmt::format("16-byte TMA rows of {} in {}", n.name, dtype_name(n.dtype)));
    } else if (dv == &chunk_div) {
      need(*dv, std::max<std::int64_t>(1, 128 / bytes), fmt::format("128-byte coalescing of {} in {}", n.name, dtype_name(n.dtype)));
    } else {
      const std::int64_t size = d.axis(inner).size;
      if (size % rows_of_16 != 0)
        reject(fmt::format("divisibility: {} = {}: rows of {} in {} are {} bytes, and TMA moves multiples of 16", dv->what,
                           size, n.name, dtype_name(n.dtype), size * bytes));
      std::int64_t width = 128;
      while (width > 32 && dv->value * bytes % width != 0) width /= 2;
      if (dv->value * bytes % width == 0)
        need(*dv, width / bytes,
             width == 128 ? fmt::format("128-byte coalescing of {} in {}", n.name, dtype_name(n.dtype))
                          : fmt::format("{}-byte swizzled rows of {} in {}", width, n.name, dtype_name(n.dtype)));
    }
  }
  out.divisibility.push_back(rows_div);
  out.divisibility.push_back(chunk_div);
  for (auto& w : whole_div) out.divisibility.push_back(w);
  for (const Divisibility& dv : out.divisibility)
    if (!dv.ok()) reject(fmt::format("divisibility: {} = {} is not a multiple of {}", dv.what, dv.value, dv.multiple));
  // Whole axes at their tiles' extents (padded) from here on: footprints and tensor-core work.
  std::vector<std::pair<AxisId, std::int64_t>> padded;
  for (std::size_t i = 0; i < sh.whole.size(); ++i)
    if (whole_div[i].padded_from > 0) padded.emplace_back(sh.whole[i], whole_div[i].value);
  per_wg.insert(per_wg.end(), padded.begin(), padded.end());

  // §2 Variables and footprints.
  const DType acc = c.accumulator_dtype.value_or(DType::f32);
  for (NodeId id : d.inputs()) {
    const Node& n = d.node(id);
    if (has(n, sh.stream)) {
      const double b = elements(d, n, per_wg) * dtype_bytes(n.dtype) * std::max(1, c.stages);
      out.variables.push_back({n.name + fmt::format(" (x{} stages)", std::max(1, c.stages)), shape_text(d, n, per_wg),
                               n.dtype, "smem", "per CTA", b});
      out.smem_per_cta_bytes += b;
    } else if (!sh.operand[static_cast<std::size_t>(id)]) {
      // A side input without the streamed axis (a per-head slope, an epilogue's [b h q e] term)
      // is read from global memory where the fused code uses it: no shared memory.
      const double b = elements(d, n, per_wg) * dtype_bytes(n.dtype);
      out.variables.push_back({n.name, shape_text(d, n, per_wg), n.dtype, "gmem", "read where used", b});
    } else {
      const double b = elements(d, n, per_wg) * dtype_bytes(n.dtype);
      out.variables.push_back({n.name, shape_text(d, n, per_wg), n.dtype, "smem", "per warpgroup", b});
      out.smem_per_warpgroup_bytes += b;
    }
  }
  for (const ir::Output& o : d.outputs) {
    const Node& n = d.node(o.node);
    // A narrow output is staged in shared memory for its TMA store; an f32 one is written from the
    // accumulators.
    if (narrow(n.dtype)) {
      const double staged = elements(d, n, per_wg) * dtype_bytes(n.dtype);
      out.variables.push_back({n.name + " (store staging)", shape_text(d, n, per_wg), n.dtype, "smem", "per warpgroup", staged});
      out.smem_per_warpgroup_bytes += staged;
    }
    if (!has(n, sh.stream)) {
      const double b = elements(d, n, per_wg) * dtype_bytes(acc);
      out.variables.push_back({n.name + " (accumulator)", shape_text(d, n, per_wg), acc, "rmem", "per warpgroup", b});
      out.registers_per_warpgroup_bytes += b;
    }
  }
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const Node& n = d.nodes[i];
    const auto id = static_cast<NodeId>(i);
    if (n.name.empty() || n.op == OpKind::input || n.op == OpKind::constant || is_output(d, id)) continue;
    const double b = elements(d, n, per_wg) * dtype_bytes(n.dtype);
    out.variables.push_back({n.name, shape_text(d, n, per_wg), n.dtype, "rmem", "per warpgroup", b});
    out.registers_per_warpgroup_bytes += b;
  }
  int stats = 0;
  for (sched::Accumulator a : sh.accumulators)
    stats += a == sched::Accumulator::online_softmax ? 3 : a == sched::Accumulator::logsumexp ? 2
             : a == sched::Accumulator::add ? 0 : 1;
  if (stats) {
    const double b = static_cast<double>(c.rows_per_warpgroup) * stats * dtype_bytes(acc);
    out.variables.push_back({fmt::format("row statistics ({})", stats == 3 ? "m, l, delta" : std::to_string(stats)),
                             fmt::format("[rows:{} x{}]", c.rows_per_warpgroup, stats), acc, "rmem", "per warpgroup", b});
    out.registers_per_warpgroup_bytes += b;
  }
  if (!c.subloops.empty()) {
    // Fragments the tensor core is fed from registers, per row, in the narrow format of the
    // contraction over the streamed axis (P in P.V).
    DType frag = DType::f16;
    for (const Node& n : dn.nodes)
      if (n.op == OpKind::contract && std::count(n.over.begin(), n.over.end(), sh.stream))
        for (NodeId o : n.operands)
          if (narrow(dn.node(o).dtype)) frag = dn.node(o).dtype;
    std::int64_t per_row_values = 0;
    std::string names;
    for (std::size_t i = 0; i < c.subloops.size(); ++i) {
      per_row_values += c.subloops[i];
      names += fmt::format("{}{}", i ? ", " : "", c.subloops[i]);
    }
    const double b = static_cast<double>(c.rows_per_warpgroup * per_row_values) * dtype_bytes(frag);
    out.variables.push_back({"tensor-core fragments (sub-loops " + names + ")",
                             fmt::format("[rows:{} x{}]", c.rows_per_warpgroup, per_row_values), frag, "rmem",
                             "per warpgroup", b});
    out.registers_per_warpgroup_bytes += b;
  }
  const double smem_sm = static_cast<double>(m.limits.smem_bytes_per_sm.value);
  const double regs_sm = static_cast<double>(m.limits.registers_per_sm.value) * 4;
  out.max_warpgroups_smem = (smem_sm - out.smem_per_cta_bytes) / out.smem_per_warpgroup_bytes;
  out.max_warpgroups_registers = regs_sm / out.registers_per_warpgroup_bytes;
  out.registers_per_thread = out.registers_per_warpgroup_bytes / threads / 4;
  const int fit = static_cast<int>(std::floor(std::min(out.max_warpgroups_smem, out.max_warpgroups_registers)));
  // One producer warpgroup besides the consumers (warp specialisation).
  const int thread_cap = static_cast<int>(static_cast<double>(m.limits.threads_per_sm.value) / threads) - 1;
  out.warpgroups = c.warpgroups > 0 ? c.warpgroups : std::min(fit, thread_cap);
  if (out.registers_per_thread > static_cast<double>(m.limits.registers_per_thread.value))
    reject(fmt::format("registers: {:.1f} per thread, the machine allows {}", out.registers_per_thread,
                       m.limits.registers_per_thread.value));
  if (out.max_warpgroups_smem < 1)
    reject(fmt::format("smem: one warpgroup needs {:.1f} KiB plus {:.1f} KiB per CTA, an SM has {:.1f} KiB",
                       out.smem_per_warpgroup_bytes / 1024, out.smem_per_cta_bytes / 1024, smem_sm / 1024));
  if (out.max_warpgroups_registers < 1)
    reject(fmt::format("registers: one warpgroup needs {:.1f} KiB, an SM has {:.1f} KiB",
                       out.registers_per_warpgroup_bytes / 1024, regs_sm / 1024));
  if (out.warpgroups > fit && fit >= 1)
    reject(fmt::format("{} warpgroups: only {:.2f} fit in smem and {:.2f} in registers", out.warpgroups,
                       out.max_warpgroups_smem, out.max_warpgroups_registers));
  if (out.warpgroups > thread_cap)
    reject(fmt::format("threads: {} consumer warpgroups and a producer exceed {} threads per SM", out.warpgroups,
                       m.limits.threads_per_sm.value));
  if (out.smem_per_cta_bytes + out.warpgroups * out.smem_per_warpgroup_bytes >
      static_cast<double>(m.limits.smem_bytes_per_block.value))
    reject(fmt::format("smem: {:.1f} KiB per CTA exceeds the per-block limit {:.1f} KiB",
                       (out.smem_per_cta_bytes + out.warpgroups * out.smem_per_warpgroup_bytes) / 1024,
                       static_cast<double>(m.limits.smem_bytes_per_block.value) / 1024));
  out.warpgroups = std::max(1, out.warpgroups);

  // §3 Throughput per row and chunk (one thread-iteration with one row a thread). `online`: a
  // softmax's rescale (exp(m_old - m_new) a row, O rescaled), absent where P is summed plainly.
  const bool online = std::count(sh.accumulators.begin(), sh.accumulators.end(), sched::Accumulator::online_softmax) > 0;
  out.online_softmax = online;
  double first_gemm_clk = -1;
  for (std::size_t i = 0; i < dn.nodes.size(); ++i) {
    const Node& n = dn.nodes[i];
    const std::string what = n.name.empty() ? std::string(ir::op_name(n.op)) : fmt::format("{} '{}'", ir::op_name(n.op), n.name);
    if (n.op == OpKind::contract) {
      // `loop`: the contraction's work a row; `tile_loop`: the tensor core's, over padded tiles.
      double loop = 1, tile_loop = 1;
      std::vector<AxisId> axes = n.axes;
      axes.insert(axes.end(), n.over.begin(), n.over.end());
      for (AxisId a : axes) {
        std::int64_t e = d.axis(a).size, tile = e;
        for (const auto& [ax, v] : per_row)
          if (ax == a) e = tile = v;
        for (const auto& [ax, v] : padded)
          if (ax == a) tile = v;
        loop *= static_cast<double>(e);
        tile_loop *= static_cast<double>(tile);
      }
      DType fmt_t = DType::f32;
      for (NodeId o : n.operands)
        if (narrow(dn.node(o).dtype)) fmt_t = dn.node(o).dtype;
      const arch::Unit u = narrow(fmt_t) ? arch::Unit::tensor_core : arch::Unit::fma;
      const auto rate = m.ops_per_clk_per_sm(u, fmt_t);
      if (!rate) return plain_error(fmt::format("machine {} has no {} rate for {}", m.name, arch::unit_name(u), dtype_name(fmt_t)));
      std::string label = fmt::format("contract over {}", ir::axes_text(dn, n.over));
      const double ops = u == arch::Unit::tensor_core ? 2 * tile_loop : loop;
      out.rates.push_back({label, u, fmt_t, ops, *rate, ops / *rate});
      out.flops_per_row += 2 * loop;
      if (u == arch::Unit::tensor_core) {
        out.tensor_clk_per_row += ops / *rate;
        if (first_gemm_clk < 0) first_gemm_clk = ops / *rate;
      } else {
        out.fma_clk_per_row += ops / *rate;
      }
    } else if ((n.op == OpKind::exp || n.op == OpKind::exp2) && has(n, sh.stream)) {
      double ops = static_cast<double>(c.chunk);
      if (online) ops += 1;  // delta
      const double rate = *m.ops_per_clk_per_sm(arch::Unit::sfu, DType::f32);
      out.rates.push_back({online ? "exp (with the rescale exp(m_old - m_new))" : "exp", arch::Unit::sfu, DType::f32, ops,
                           rate, ops / rate});
      out.sfu_clk_per_row += ops / rate;
    } else if (n.op == OpKind::div && n.operands.size() == 2 && has(dn.node(n.operands[1]), sh.stream)) {
      // A division by a score-shaped value (sigmoid's 1 / (1 + exp(-s))): the kernel multiplies
      // by a reciprocal, one on the SFU a score.
      const double ops = static_cast<double>(c.chunk);
      const double rate = *m.ops_per_clk_per_sm(arch::Unit::sfu, DType::f32);
      out.rates.push_back({"reciprocal (a division by a score)", arch::Unit::sfu, DType::f32, ops, rate, ops / rate});
      out.sfu_clk_per_row += ops / rate;
    }
  }
  for (const ir::Output& o : dn.outputs) {
    const Node& n = dn.node(o.node);
    if (has(n, sh.stream)) continue;
    const DType t = acc == DType::f64 ? DType::f64 : (acc == DType::f32 ? DType::f32 : DType::f16);
    const auto rate = m.ops_per_clk_per_sm(arch::Unit::fma, t);
    if (!rate) return plain_error(fmt::format("machine {} has no fma rate for {}", m.name, dtype_name(t)));
    // (Over the padded tile: the accumulator holds its columns.)
    std::vector<std::pair<AxisId, std::int64_t>> tile_row = per_row;
    tile_row.insert(tile_row.end(), padded.begin(), padded.end());
    const double ops = elements(d, n, tile_row);
    out.rates.push_back({fmt::format("{} {}", online ? "rescale and accumulate" : "accumulate", n.name), arch::Unit::fma, t,
                         ops, *rate, ops / *rate});
    out.fma_clk_per_row += ops / *rate;
  }
  const double ideal = std::max({out.tensor_clk_per_row, out.sfu_clk_per_row, out.fma_clk_per_row});
  out.bound_unit = ideal == out.tensor_clk_per_row ? "tensor_core" : ideal == out.sfu_clk_per_row ? "sfu" : "fma";
  const double rows_per_sm = static_cast<double>(out.warpgroups * c.rows_per_warpgroup);
  out.compute_s_per_iteration = rows_per_sm * ideal / clock;
  double chunk_bytes = 0;
  for (NodeId id : d.inputs())
    if (has(d.node(id), sh.stream)) chunk_bytes += elements(d, d.node(id), per_wg) * dtype_bytes(d.node(id).dtype);
  out.transfer_s_per_iteration = chunk_bytes * sms / m.bytes_per_s(arch::kL2);
  // The CTAs of one batch slice read the same chunks; a slice-major tile order keeps them
  // resident together, up to every SM (§4).
  double batch = 1;
  for (AxisId a : sh.batch) batch *= static_cast<double>(d.axis(a).size);
  const double rows_total = static_cast<double>(d.axis(sh.row).size);
  const double ctas_per_slice = std::ceil(rows_total / rows_per_sm);
  out.ctas_sharing_chunk = std::min(ctas_per_slice, sms);
  out.hbm_s_per_iteration = out.transfer_s_per_iteration / out.ctas_sharing_chunk;
  out.l2_smem_s_per_iteration = chunk_bytes * sms / m.bytes_per_s(arch::kSmem);
  out.compute_bound = out.compute_s_per_iteration >= out.transfer_with_l2_s_per_iteration();
  out.ideal_flops_per_s = out.flops_per_row / ideal * sms * clock;

  // §4 Overlap.
  const double non_tensor = (1 + c.overhead) * std::max(out.sfu_clk_per_row, out.fma_clk_per_row);
  double period = 0;
  switch (c.overlap) {
    case Overlap::sequential: period = out.tensor_clk_per_row + non_tensor; break;
    case Overlap::intra_warpgroup:
      period = std::max(first_gemm_clk, 0.0) + std::max(out.tensor_clk_per_row - std::max(first_gemm_clk, 0.0), non_tensor);
      break;
    case Overlap::pingpong:
      period = std::max(out.tensor_clk_per_row, non_tensor);
      if (out.warpgroups < 2) reject("pingpong needs at least 2 consumer warpgroups");
      break;
  }
  // With one stage the next chunk's load cannot overlap this chunk's compute.
  const double transfer_clk_per_row = out.transfer_with_l2_s_per_iteration() * clock / rows_per_sm;
  out.period_clk_per_row = c.stages >= 2 ? std::max(period, transfer_clk_per_row) : period + transfer_clk_per_row;
  out.efficiency = ideal / out.period_clk_per_row;
  out.predicted_flops_per_s = out.flops_per_row / out.period_clk_per_row * sms * clock;

  // The whole diagram: CTAs of N * w_q rows per (batch) slice, in waves over the SMs.
  const double ctas = batch * ctas_per_slice;
  const double chunks = std::ceil(static_cast<double>(d.axis(sh.stream).size) / static_cast<double>(c.chunk));
  // Where the tiles fill under 80 % of the SMs (decoding), the device library splits each
  // tile's stream into slices, each a CTA of its own (detail::fwd_num_splits), and a combine
  // pass merges their partial rows: f32 accumulators and a statistic a row, written and read
  // back once.
  out.splits = napkin::detail::fwd_num_splits(static_cast<int>(std::min(ctas, 1e9)), static_cast<int>(sms),
                                              static_cast<int>(std::min(chunks, 1e9)));
  const double waves = std::ceil(ctas * out.splits / sms);
  if (out.splits > 1) {
    double partial_bytes = 0;  // a split's rows: each output's f32 values and the row's LSE
    for (const ir::Output& o : d.outputs) partial_bytes += 4.0 * (elements(d, d.node(o.node), per_row) + 1) * rows_total * batch;
    out.combine_s = 2.0 * out.splits * partial_bytes / m.bytes_per_s(arch::kL2) + kKernelFixedS;  // a launch of its own
  }
  // Each tile also fills its pipeline before the first chunk computes: its resident inputs
  // (Q) and first chunks load at the SM's share of HBM bandwidth (§4), the chunks once per
  // sharing group. The store of the previous tile's output overlaps (persistent CTAs with
  // separate staging).
  double fill_bytes = chunk_bytes / out.ctas_sharing_chunk;
  for (NodeId id : d.inputs())
    if (!has(d.node(id), sh.stream)) fill_bytes += elements(d, d.node(id), per_wg) * dtype_bytes(d.node(id).dtype) * out.warpgroups;
  out.tile_fill_s = fill_bytes / (m.bytes_per_s(arch::kL2) / sms);
  // The tile of the last row axis: per warpgroup, and per CTA (the smem level).
  const std::int64_t last_wg = static_cast<std::int64_t>(std::max(1.0, last_per_wg));
  const std::int64_t last_cta = std::min(last_wg * out.warpgroups, d.axis(last_row).size);
  // Blocks that a mask makes all -inf (causal: above the diagonal) are skipped (sched/skip.h);
  // the persistent scheduler spreads the remaining blocks evenly over the SMs. Only for
  // feasible configurations: the analysis walks every (tile, chunk) block.
  if (!out.rejection) {
    out.visited_fraction = sched::block_skipping(d, last_row, last_cta, sh.stream, c.chunk).visited_fraction();
    for (ir::NodeId in : sched::mask_inputs(d, sh.stream)) out.mask_inputs.push_back(d.node(in).name);
  }
  out.predicted_time_s =
      waves * (out.visited_fraction * std::ceil(chunks / out.splits) * rows_per_sm * out.period_clk_per_row / clock +
               out.tile_fill_s) +
      out.combine_s + kKernelFixedS;
  // A streamed input's chunk is loaded where any of a slice's tiles visits it: a fraction
  // visited x tiles of it, at most all (a narrow band of a sliding window reads each chunk once
  // or twice, where the sharing above counts every tile of the slice); one indexed by the rows
  // too (a bias table [h q k]) only in the visited blocks.
  double compulsory_bytes = 0;
  for (NodeId id : d.inputs()) {
    const Node& x = d.node(id);
    const double bytes = static_cast<double>(d.elements(x.axes)) * dtype_bytes(x.dtype);
    const double read = !has(x, sh.stream) ? 1.0
                        : has(x, sh.row)   ? out.visited_fraction
                                           : std::min(1.0, out.visited_fraction * ctas_per_slice);
    compulsory_bytes += bytes * read;
  }
  for (const ir::Output& o : d.outputs)
    compulsory_bytes += static_cast<double>(d.elements(d.node(o.node).axes)) * dtype_bytes(d.node(o.node).dtype);
  out.compulsory_s = compulsory_bytes / m.bytes_per_s(arch::kL2) + kKernelFixedS;
  out.predicted_time_s = std::max(out.predicted_time_s, out.compulsory_s);

  // The configuration as a schedule: smem holds a CTA's tile, rmem a warpgroup's.
  sched::LevelSchedule smem, rmem;
  smem.level = std::string(arch::kSmem);
  rmem.level = std::string(arch::kRmem);
  for (AxisId a : sh.batch) {
    smem.tiles.push_back({d.axis(a).name, 1});
    rmem.tiles.push_back({d.axis(a).name, 1});
  }
  smem.tiles.push_back({d.axis(last_row).name, last_cta});
  rmem.tiles.push_back({d.axis(last_row).name, std::min(last_wg, d.axis(last_row).size)});
  const std::int64_t chunk = std::min(c.chunk, d.axis(sh.stream).size);
  smem.streams.push_back({stream_name, chunk, sh.accumulators});
  rmem.streams.push_back({stream_name, chunk, sh.accumulators});
  for (NodeId id : d.inputs()) smem.keep.push_back({d.node(id).name, std::nullopt});
  for (const ir::Output& o : d.outputs) {
    smem.keep.push_back({d.node(o.node).name, std::nullopt});
    rmem.keep.push_back({d.node(o.node).name, c.accumulator_dtype});
  }
  smem.stages = std::max(1, c.stages);
  rmem.groups = out.warpgroups;
  rmem.overlap = c.overlap == Overlap::pingpong && out.warpgroups < 2 ? Overlap::sequential : c.overlap;
  out.schedule.levels = {smem, rmem};
  return out;
}

}  // namespace napkin::search
