// SPDX-License-Identifier: Apache-2.0
#include "ir/verifier.h"

#include <set>

#include <fmt/format.h>

#include "ir/builder.h"

namespace napkin::ir {

Result<std::vector<Diagnostic>> verify(const Diagram& d, const SourceText* source) {
  const SourceText fallback{d.source_name, {}};
  const SourceText& src = source ? *source : fallback;
  std::set<std::string> names;
  for (const Axis& a : d.axes) {
    if (a.size <= 0)
      return make_error(src, a.loc,
                        fmt::format("axis '{}' must have a positive size, found {}", a.name, a.size));
    if (!names.insert(a.name).second)
      return make_error(src, a.loc, fmt::format("'{}' is defined twice", a.name));
  }
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const Node& n = d.nodes[i];
    for (NodeId o : n.operands)
      if (o < 0 || static_cast<std::size_t>(o) >= i)
        return make_error(src, n.loc, fmt::format("node {} uses operand {} that is not defined "
                                                  "before it (the diagram must be acyclic)",
                                                  d.label(static_cast<NodeId>(i)), o));
    if (!n.name.empty() && !names.insert(n.name).second)
      return make_error(src, n.loc, fmt::format("'{}' is defined twice", n.name));
    auto inferred = infer_type(d, n);
    if (auto* e = std::get_if<std::string>(&inferred)) return make_error(src, n.loc, *e);
    const auto& t = std::get<InferredType>(inferred);
    if (t.axes != n.axes || t.dtype != n.dtype)
      return make_error(src, n.loc,
                        fmt::format("node {} is typed {} {} but its operands give {} {}",
                                    d.label(static_cast<NodeId>(i)), axes_text(d, n.axes),
                                    dtype_name(n.dtype), axes_text(d, t.axes),
                                    dtype_name(t.dtype)));
    std::int64_t count = 1;
    for (AxisId a : n.axes)
      if (__builtin_mul_overflow(count, d.axis(a).size, &count))
        return make_error(src, n.loc, fmt::format("{} over {} has more than 2^63 elements",
                                                  d.label(static_cast<NodeId>(i)),
                                                  axes_text(d, n.axes)));
  }
  if (d.outputs.empty())
    return make_error(src, {}, "the diagram has no outputs",
                      "declare one with a line such as `out O`");
  std::set<NodeId> used;
  for (const Node& n : d.nodes) used.insert(n.operands.begin(), n.operands.end());
  for (const Output& o : d.outputs) used.insert(o.node);
  std::vector<Diagnostic> warnings;
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const Node& n = d.nodes[i];
    if (used.count(static_cast<NodeId>(i)) || n.name.empty()) continue;
    if (n.op == OpKind::input)
      warnings.push_back(make_warning(src, n.loc, fmt::format("input '{}' is never used", n.name)));
    else if (n.op != OpKind::constant)
      warnings.push_back(make_warning(src, n.loc,
                                      fmt::format("'{}' is computed but never used", n.name)));
  }
  return warnings;
}

}  // namespace napkin::ir
