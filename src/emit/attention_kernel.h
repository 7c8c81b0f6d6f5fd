// SPDX-License-Identifier: Apache-2.0
// The attention family, recognised in a diagram and written as a CUDA translation unit that
// instantiates the device library's attention kernel (runtime/include/napkin/attention_kernel.h)
// with the diagram's own elementwise code fused in. CUDA-free: it writes text.
//
// The family: O = epilogue( contract( normalise( score(contract(Q, K over d)) ), V over k ) )
//   score      elementwise code over the raw scores, axis indices, params and auxiliary inputs
//              (a mask is a select(pred, x, -inf) on top of it, pred free of the scores)
//   normalise  softmax over k (online), or none: P is the score code itself (sigmoid
//              attention), summed plainly; a mask then selects 0
//   epilogue   elementwise code over O, axis indices, auxiliary inputs and the row's
//              logsumexp of the softmax's own input (attention sinks)
//   LSE        optionally a second output: that logsumexp itself (f32, over the batch, head,
//              group and query axes in that order), as FlashAttention returns it for a backward
//              pass (-inf for a row that sees no key, as the reference interpreter gives)
// Anything else is refused with the op, its location and the reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "support/diagnostic.h"

namespace napkin::emit {

// An input the fused code reads besides Q, K and V, with the role of each of its dims.
struct AuxInput {
  ir::NodeId node = -1;
  std::string roles;  // one letter per dim in declared order: b h g q k e
};

struct AttentionForm {
  ir::NodeId q = -1, k = -1, v = -1;      // the inputs
  ir::NodeId qk = -1;                     // contract(Q, K over d)
  ir::NodeId pv = -1;                     // contract(P, V over k)
  ir::NodeId normaliser = -1;             // the softmax, or -1 (P is elementwise code of qk)
  ir::NodeId score = -1;                  // the score code's top (softmax's input less its mask; or P less its mask)
  std::vector<ir::NodeId> masks;          // the mask's predicates (all must hold), outermost first
  ir::NodeId lse = -1;                    // logsumexp of the softmax's input read by the epilogue, or -1
  ir::NodeId output = -1;                 // the output node (O)
  ir::NodeId lse_output = -1;             // the row logsumexp written as a second output, or -1
  std::size_t o_index = 0;                // O's place among the diagram's outputs
  std::string lse_roles;                  // the LSE output's roles, written order (b h g q)
  ir::NodeId epilogue = -1;               // the epilogue's top (output less a cast to the element type); pv: none
  // The score's factor, folded into the softmax's exp2: score = factor * rest, where the factor
  // is a product of values free of the query row and the key, taken from `factor_nodes` (scale,
  // neg, softcap's cap, * or / by such a value) on the score's path down to qk. Every term added
  // beside the path is divided by the factor below it, so below a sum only nonzero finite
  // constants are taken out; a negative factor flips the rest's sign.
  std::vector<ir::NodeId> score_path;     // the score's top, then down ops linear in qk, to qk or the op that is not
  std::vector<ir::NodeId> factor_nodes;   // the path's nodes whose multiplier is the factor's
  double factor_constant = 1.0;           // the factor's literal part
  bool factor_per_tile = false;           // the factor reads params or inputs, or is not a positive constant:
                                          // computed per (batch, head) tile (Fusion::score_factor)
  bool score_is_raw = false;              // rest is qk itself: no per-score code
  bool skips_blocks = false;              // the mask depends on indices and constants alone
  // Roles: axis ids, -1 when absent.
  ir::AxisId batch = -1, head = -1, group = -1, query = -1, key = -1, dim = -1, vdim = -1;
  std::string q_roles, k_roles, v_roles, o_roles;  // per dim, declared (output: written) order
  std::vector<AuxInput> aux;
  std::vector<ir::NodeId> params;         // named constants the fused code reads: kernel arguments
  DType element = DType::bf16;            // Q, K and V
  DType output_dtype = DType::bf16;       // O: the operands' dtype, or f32
  std::int64_t head_dim = 0;    // Q's and K's
  std::int64_t head_dim_v = 0;  // V's and O's
};

// The attention-family form of `d`, or the reason it has none, located at the op that breaks
// it (`src` is the diagram's text, for the caret).
Result<AttentionForm> recognise_attention(const ir::Diagram& d, const SourceText& src);

// Provenance written into the generated file's header.
struct KernelProvenance {
  std::string napkin_version;
  std::string diagram_key;   // ir::diagram_key
  std::string source_name;   // the .napkin path as given
  std::string derived;       // napkin's derived schedule and prediction, one line (or why none)
};

// The CUDA translation unit: the Fusion, its host binding and the C entry points
// (runtime/include/napkin/kernel_abi.h). `manifest_json` is embedded verbatim. With an
// `entry_name`, the unit is one kernel of a plan's library: it exports only that launch entry
// (and `manifest_json` is unused).
std::string emit_attention_kernel(const ir::Diagram& d, const AttentionForm& form, const KernelProvenance& prov,
                                  const std::string& manifest_json, const std::string& entry_name = "");

// One line describing the fused code, e.g. "score mod: yes; mask: causal-like (skips blocks);
// softmax; epilogue: no".
std::string describe_fusion(const AttentionForm& form);

}  // namespace napkin::emit
