// SPDX-License-Identifier: Apache-2.0
// Row kernels: a kernel of a plan with no contraction, written as a CUDA translation unit over
// the device library's row header (runtime/include/napkin/row_kernel.h). A CTA per row: the
// row axis is the one every reduction runs over (a norm's, a softmax's), or for an elementwise
// kernel the output's innermost axis; every other axis indexes rows. Each reduction is a pass
// over the row (the row's re-reads come from L1/L2, so HBM reads it once), then the outputs.
// CUDA-free: it writes text.
#pragma once

#include <string>
#include <vector>

#include "emit/attention_kernel.h"
#include "ir/ir.h"
#include "plan/plan.h"
#include "support/diagnostic.h"

namespace napkin::emit {

struct RowForm {
  ir::Diagram normalised;        // the kernel's diagram with composites expanded
  ir::AxisId row_axis = -1;      // the axis a CTA walks (in `normalised`)
  bool reduces = false;          // false: an elementwise kernel
  std::vector<ir::NodeId> reductions;  // in `normalised`, in order
};

// The row form of `d`, or the reason it has none, located at the op that breaks it.
Result<RowForm> recognise_rows(const ir::Diagram& d, const SourceText& src);

// The translation unit, exporting `entry_name` (the C interface of napkin/kernel_abi.h).
std::string emit_row_kernel(const ir::Diagram& d, const RowForm& f, const plan::RowSchedule& s,
                            const KernelProvenance& prov, const std::string& entry_name);

std::string describe_rows(const RowForm& f);

}  // namespace napkin::emit
