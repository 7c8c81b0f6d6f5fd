// SPDX-License-Identifier: Apache-2.0
#include "emit/gemm_kernel.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "emit/expression.h"

namespace napkin::emit {

using ir::AxisId;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

namespace {

bool contains(const std::vector<AxisId>& v, AxisId a) { return std::find(v.begin(), v.end(), a) != v.end(); }

const char* cutlass_type(DType t) {
  switch (t) {
    case DType::bf16: return "cutlass::bfloat16_t";
    case DType::f16: return "cutlass::half_t";
    case DType::f32: return "float";
    default: return nullptr;
  }
}
const char* abi(DType t) {
  switch (t) {
    case DType::bf16: return "NAPKIN_BF16";
    case DType::f16: return "NAPKIN_F16";
    default: return "NAPKIN_F32";
  }
}

// The dims (positions in storage order) of `axes` in `order`; whether they are adjacent.
std::vector<int> dims_of(const std::vector<AxisId>& order, const std::vector<AxisId>& axes) {
  std::vector<int> dims;
  for (std::size_t i = 0; i < order.size(); ++i)
    if (contains(axes, order[i])) dims.push_back(static_cast<int>(i));
  return dims;
}
bool adjacent(const std::vector<int>& dims) {
  for (std::size_t i = 1; i < dims.size(); ++i)
    if (dims[i] != dims[i - 1] + 1) return false;
  return true;
}

std::string roles_of(const std::vector<AxisId>& order) {
  std::string r;
  for (AxisId a : order) r += static_cast<char>('a' + a);
  return r;
}

}  // namespace

Result<GemmForm> recognise_gemm(const ir::Diagram& d, const SourceText& src) {
  GemmForm f;
  for (NodeId n = 0; n < static_cast<NodeId>(d.nodes.size()); ++n) {
    const Node& x = d.node(n);
    if (x.op == OpKind::contract) {
      if (f.contraction >= 0) return make_error(src, x.loc, fmt::format("{}: a GEMM kernel has one contraction", d.label(n)));
      f.contraction = n;
    } else if (x.op == OpKind::iota) {
      return make_error(src, x.loc, "an index in the epilogue: the GEMM's epilogue visitor tree has no index node");
    } else if (x.op == OpKind::constant && !x.name.empty()) {
      return make_error(src, x.loc, fmt::format("param '{}' in a GEMM's epilogue: not generated yet (write its value)", x.name));
    } else if (x.op != OpKind::input && x.op != OpKind::constant && !ir::is_elementwise(x.op)) {
      return make_error(src, x.loc, fmt::format("{}: a GEMM's epilogue is elementwise code", d.label(n)));
    }
  }
  if (f.contraction < 0) return plain_error("no contraction: not a GEMM kernel");
  const Node& c = d.node(f.contraction);
  if (c.operands.size() != 2) return make_error(src, c.loc, "a GEMM contracts two operands");
  f.a = c.operands[0];
  f.b = c.operands[1];
  for (NodeId o : {f.a, f.b})
    if (d.node(o).op != OpKind::input)
      return make_error(src, d.node(o).loc, fmt::format("{} is computed: a GEMM's operands are read from memory by TMA", d.label(o)));
  const Node& A = d.node(f.a);
  const Node& B = d.node(f.b);
  if (A.dtype != B.dtype || cutlass_type(A.dtype) == nullptr || A.dtype == DType::f32)
    return make_error(src, c.loc, fmt::format("operands {} and {}: the GEMM takes two bf16 or two f16 operands", dtype_name(A.dtype),
                                              dtype_name(B.dtype)));
  f.element = A.dtype;
  if (d.outputs.size() != 1) return plain_error("a GEMM kernel writes one output");
  f.output = d.outputs[0].node;
  const std::vector<AxisId>& out_order = d.outputs[0].axes;
  if (cutlass_type(d.node(f.output).dtype) == nullptr)
    return make_error(src, d.node(f.output).loc, fmt::format("output {}: a GEMM writes bf16, f16 or f32", dtype_name(d.node(f.output).dtype)));
  for (AxisId x : A.axes) {
    if (contains(B.axes, x)) (contains(c.axes, x) ? f.l : f.k).push_back(x);
    else if (contains(c.axes, x)) f.m.push_back(x);
    else return make_error(src, c.loc, fmt::format("axis {} is summed within {}", d.axis(x).name, A.name));
  }
  for (AxisId x : B.axes)
    if (!contains(A.axes, x)) {
      if (contains(c.axes, x)) f.n.push_back(x);
      else return make_error(src, c.loc, fmt::format("axis {} is summed within {}", d.axis(x).name, B.name));
    }
  if (f.k.size() != 1) return make_error(src, c.loc, fmt::format("{} contracted axes: the GEMM kernel contracts one", f.k.size()));
  if (f.m.empty() || f.n.empty()) return make_error(src, c.loc, "a GEMM needs an axis of A alone and one of B alone (M and N)");
  auto check_modes = [&](const Node& t, const std::vector<AxisId>& order, std::initializer_list<const std::vector<AxisId>*> modes,
                         const std::vector<AxisId>& inner_ok) -> std::string {
    for (const auto* mode : modes)
      if (!adjacent(dims_of(order, *mode))) return fmt::format("{}'s axes of one GEMM mode are not adjacent in memory", t.name.empty() ? "the output" : t.name);
    if (!contains(inner_ok, order.back()))
      return fmt::format("{}'s innermost axis {} is a batch axis: TMA needs a contiguous M, N or K", t.name.empty() ? "the output" : t.name,
                         d.axis(order.back()).name);
    return "";
  };
  std::vector<AxisId> mk = f.m, nk = f.n, mn = f.m;
  mk.insert(mk.end(), f.k.begin(), f.k.end());
  nk.insert(nk.end(), f.k.begin(), f.k.end());
  mn.insert(mn.end(), f.n.begin(), f.n.end());
  if (auto e = check_modes(A, A.axes, {&f.m, &f.k, &f.l}, mk); !e.empty()) return make_error(src, A.loc, e);
  if (auto e = check_modes(B, B.axes, {&f.n, &f.k, &f.l}, nk); !e.empty()) return make_error(src, B.loc, e);
  if (auto e = check_modes(d.node(f.output), out_order, {&f.m, &f.n, &f.l}, mn); !e.empty()) return make_error(src, d.outputs[0].loc, e);
  for (NodeId n : d.inputs()) {
    if (n == f.a || n == f.b) continue;
    const Node& x = d.node(n);
    bool along_m = !x.axes.empty(), along_n = !x.axes.empty();
    for (AxisId a : x.axes) {
      along_m = along_m && (contains(f.m, a) || contains(f.l, a));
      along_n = along_n && (contains(f.n, a) || contains(f.l, a));
    }
    const bool inner_m = !x.axes.empty() && contains(f.m, x.axes.back());
    const bool inner_n = !x.axes.empty() && contains(f.n, x.axes.back());
    if (along_m && inner_m && adjacent(dims_of(x.axes, f.m))) f.row_vectors.push_back(n);
    else if (along_n && inner_n && adjacent(dims_of(x.axes, f.n))) f.col_vectors.push_back(n);
    else
      return make_error(src, x.loc, fmt::format("epilogue input '{}': the GEMM's epilogue reads vectors along M or along N "
                                                "(a bias, a row scale); a tensor over both needs an aux load, not generated yet",
                                                x.name));
    if (cutlass_type(x.dtype) == nullptr)
      return make_error(src, x.loc, fmt::format("epilogue input '{}' is {}: bf16, f16 or f32", x.name, dtype_name(x.dtype)));
  }
  return f;
}

std::string describe_gemm(const ir::Diagram& d, const GemmForm& f) {
  auto names = [&](const std::vector<AxisId>& v) {
    std::vector<std::string> s;
    for (AxisId a : v) s.push_back(d.axis(a).name);
    return fmt::format("{}", fmt::join(s, " "));
  };
  return fmt::format("gemm {} [{}] x {} [{}] over {}{}; epilogue reads {} row and {} column vector(s); writes {}", d.node(f.a).name,
                     names(d.node(f.a).axes), d.node(f.b).name, names(d.node(f.b).axes), names(f.k),
                     f.l.empty() ? "" : ", batched over " + names(f.l), f.row_vectors.size(), f.col_vectors.size(),
                     d.node(f.output).name);
}

std::string emit_gemm_kernel(const ir::Diagram& d, const GemmForm& f, const plan::GemmSchedule& s, const KernelProvenance& prov,
                             const std::string& entry_name) {
  const Node& A = d.node(f.a);
  const Node& B = d.node(f.b);
  const Node& O = d.node(f.output);
  const std::vector<AxisId>& out_order = d.outputs[0].axes;
  const bool a_k_major = contains(f.k, A.axes.back());
  const bool b_k_major = contains(f.k, B.axes.back());
  const bool d_n_major = contains(f.n, out_order.back());
  std::string out = fmt::format(
      "// SPDX-License-Identifier: Apache-2.0\n// Generated by napkin {} from {} ({}). Do not edit: `napkin build` writes it.\n"
      "// {}\n// {}\n// schedule: {}\n#include \"napkin/gemm_kernel.h\"\n\nnamespace {{\n\nusing namespace cute;\n\n",
      prov.napkin_version, prov.source_name, prov.diagram_key, prov.derived, describe_gemm(d, f), plan::gemm_schedule_text(s));
  // The epilogue functor: the diagram's code from the accumulator and the vectors.
  std::map<NodeId, std::string> leaves{{f.contraction, "x0[i]"}};
  std::vector<NodeId> vectors = f.row_vectors;
  vectors.insert(vectors.end(), f.col_vectors.begin(), f.col_vectors.end());
  std::string params = "cutlass::Array<float, N> const& x0";
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    leaves[vectors[i]] = fmt::format("x{}[i]", i + 1);
    params += fmt::format(", cutlass::Array<float, N> const& x{}", i + 1);
  }
  expression::Writer w(d, leaves);
  std::string body;
  const std::string result = w.value(f.output, body, "      ");
  out += "// The diagram's epilogue, elementwise on a fragment of the accumulator.\ntemplate <class T>\nstruct Epilogue;\n";
  out += fmt::format("template <int N>\nstruct Epilogue<cutlass::Array<float, N>> {{\n  CUTLASS_DEVICE cutlass::Array<float, N> "
                     "operator()({}) const {{\n    cutlass::Array<float, N> out;\n    CUTLASS_PRAGMA_UNROLL\n    for (int i = 0; i < N; ++i) {{\n",
                     params);
  out += body + fmt::format("      out[i] = static_cast<float>({});\n    }}\n    return out;\n  }}\n}};\n\n", result);
  out += fmt::format("using Element = {};\nusing ElementD = {};\n", cutlass_type(f.element), cutlass_type(O.dtype));
  out += fmt::format("using LayoutA = cutlass::layout::{};  // {}-major A\n", a_k_major ? "RowMajor" : "ColumnMajor", a_k_major ? "K" : "M");
  out += fmt::format("using LayoutB = cutlass::layout::{};  // {}-major B\n", b_k_major ? "ColumnMajor" : "RowMajor", b_k_major ? "K" : "N");
  out += fmt::format("using LayoutD = cutlass::layout::{};  // {}-major D\n", d_n_major ? "RowMajor" : "ColumnMajor", d_n_major ? "N" : "M");
  out += fmt::format("using TileShape = Shape<_{}, _{}, _{}>;\nusing ClusterShape = Shape<_{}, _{}, _1>;\n", s.tile_m, s.tile_n, s.tile_k,
                     s.cluster_m, s.cluster_n);
  out += fmt::format("using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized{};\n", s.pingpong ? "Pingpong" : "Cooperative");
  out += fmt::format("using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized{};\n", s.pingpong ? "" : "Cooperative");
  out += "using namespace cutlass::epilogue::fusion;\n";
  std::string leaf_types;
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    const bool row = i < f.row_vectors.size();  // along M: CUTLASS's column broadcast
    out += fmt::format("using Leaf{} = Sm90{}Broadcast<0, TileShape, {}, float, Stride<{}, int64_t>>;  // {}\n", i + 1,
                       row ? "Col" : "Row", cutlass_type(d.node(vectors[i]).dtype), row ? "_1, _0" : "_0, _1", d.node(vectors[i]).name);
    leaf_types += fmt::format(", Leaf{}", i + 1);
  }
  out += fmt::format("using EVT = Sm90EVT<Sm90Compute<Epilogue, ElementD, float, cutlass::FloatRoundStyle::round_to_nearest>, "
                     "Sm90AccFetch{}>;\n\n", leaf_types);
  out += "using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<\n"
         "    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,\n"
         "    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, 128 / cutlass::sizeof_bits<ElementD>::value,\n"
         "    ElementD, LayoutD, 128 / cutlass::sizeof_bits<ElementD>::value, EpilogueSchedule, EVT>::CollectiveOp;\n";
  out += fmt::format(
      "using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<\n"
      "    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, 8, Element, LayoutB, 8, float, TileShape, ClusterShape,\n"
      "    {},\n    KernelSchedule>::CollectiveOp;\n",
      s.stages > 0 ? fmt::format("cutlass::gemm::collective::StageCount<{}>", s.stages)
                   : "cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>");
  out += "using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue>;\n"
         "using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;\n\n}  // namespace\n\n";

  // The entry.
  out += fmt::format("extern \"C\" int32_t {}(const napkin_tensor* tensors, int32_t count, void* stream, char* err, int32_t err_len) {{\n",
                     entry_name);
  out += "  napkin::TensorBinder tb(tensors, count);\n";
  out += fmt::format("  const napkin_tensor* A = tb.bind(\"{}\", {}, \"{}\");\n", A.name, abi(A.dtype), roles_of(A.axes));
  out += fmt::format("  const napkin_tensor* B = tb.bind(\"{}\", {}, \"{}\");\n", B.name, abi(B.dtype), roles_of(B.axes));
  out += fmt::format("  const napkin_tensor* D = tb.bind(\"{}\", {}, \"{}\");\n", O.name, abi(O.dtype), roles_of(out_order));
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    const Node& v = d.node(vectors[i]);
    out += fmt::format("  const napkin_tensor* V{} = tb.bind(\"{}\", {}, \"{}\");\n", i + 1, v.name, abi(v.dtype), roles_of(v.axes));
  }
  out += "  if (!tb.error().empty()) return napkin::host::fail(tb.error(), err, err_len);\n";
  out += "  napkin::gemm::Mode am, ak, al, bn, bk, bl, dm, dn, dl;\n  std::string e;\n";
  auto flat = [&](const char* t, const std::string& name, const std::vector<AxisId>& order, const std::vector<AxisId>& mode,
                  const char* var) {
    const std::vector<int> dims = dims_of(order, mode);
    std::string list;
    for (int x : dims) list += (list.empty() ? "" : ", ") + std::to_string(x);
    if (dims.empty()) return fmt::format("  {}.extent = 1;\n", var);
    return fmt::format("  {{ static const int dims[] = {{{}}}; if (e.empty()) e = napkin::gemm::flatten({}, \"{}\", dims, {}, &{}); }}\n",
                       list, t, name, dims.size(), var);
  };
  out += flat("A", A.name, A.axes, f.m, "am") + flat("A", A.name, A.axes, f.k, "ak") + flat("A", A.name, A.axes, f.l, "al");
  out += flat("B", B.name, B.axes, f.n, "bn") + flat("B", B.name, B.axes, f.k, "bk") + flat("B", B.name, B.axes, f.l, "bl");
  out += flat("D", O.name, out_order, f.m, "dm") + flat("D", O.name, out_order, f.n, "dn") + flat("D", O.name, out_order, f.l, "dl");
  out += "  if (!e.empty()) return napkin::host::fail(e, err, err_len);\n";
  out += fmt::format("  if ({}.stride != 1 || {}.stride != 1 || {}.stride != 1)\n    return napkin::host::fail(\"{}, {} and {} need unit "
                     "stride along their innermost dim\", err, err_len);\n",
                     a_k_major ? "ak" : "am", b_k_major ? "bk" : "bn", d_n_major ? "dn" : "dm", A.name, B.name, O.name);
  out += "  const int M = static_cast<int>(am.extent), N = static_cast<int>(bn.extent), K = static_cast<int>(ak.extent), "
         "L = static_cast<int>(al.extent);\n";
  out += a_k_major ? "  const auto sa = cute::make_stride(am.stride, cute::Int<1>{}, al.stride);\n"
                   : "  const auto sa = cute::make_stride(cute::Int<1>{}, ak.stride, al.stride);\n";
  out += b_k_major ? "  const auto sb = cute::make_stride(bn.stride, cute::Int<1>{}, bl.stride);\n"
                   : "  const auto sb = cute::make_stride(cute::Int<1>{}, bk.stride, bl.stride);\n";
  out += d_n_major ? "  const auto sd = cute::make_stride(dm.stride, cute::Int<1>{}, dl.stride);\n"
                   : "  const auto sd = cute::make_stride(cute::Int<1>{}, dn.stride, dl.stride);\n";
  std::string leaf_args;
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    const Node& v = d.node(vectors[i]);
    const bool row = i < f.row_vectors.size();
    const std::vector<int> ldims = dims_of(v.axes, f.l);
    out += fmt::format("  napkin::gemm::Mode v{}l;\n", i + 1);
    if (ldims.empty()) out += fmt::format("  v{}l.stride = 0;\n", i + 1);
    else {
      std::string list;
      for (int x : ldims) list += (list.empty() ? "" : ", ") + std::to_string(x);
      out += fmt::format("  {{ static const int dims[] = {{{}}}; e = napkin::gemm::flatten(V{}, \"{}\", dims, {}, &v{}l); }}\n", list,
                         i + 1, v.name, ldims.size(), i + 1);
    }
    out += fmt::format("  if (V{0}->strides[V{0}->rank - 1] != 1) return napkin::host::fail(\"'{1}' needs unit stride along its "
                       "innermost dim\", err, err_len);\n", i + 1, v.name);
    leaf_args += fmt::format(", {{static_cast<const {}*>(V{}->data), {}(0), {{{}, int64_t(v{}l.stride)}}}}", cutlass_type(v.dtype), i + 1,
                             cutlass_type(v.dtype), row ? "_1{}, _0{}" : "_0{}, _1{}", i + 1);
  }
  out += "  typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm, {M, N, K, L},\n"
         "      {static_cast<const Element*>(A->data), sa, static_cast<const Element*>(B->data), sb},\n";
  out += fmt::format("      {{{{{{}}{}, {{}}}}, nullptr, sd, static_cast<ElementD*>(D->data), sd}}}};\n", leaf_args);
  out += "  e = napkin::gemm::run<Gemm>(args, static_cast<cudaStream_t>(stream));\n"
         "  return e.empty() ? 0 : napkin::host::fail(e, err, err_len);\n}\n";
  return out;
}

}  // namespace napkin::emit
