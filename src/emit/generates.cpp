// SPDX-License-Identifier: Apache-2.0
#include "emit/generates.h"

#include <utility>

#include <fmt/format.h>

#include "emit/attention_kernel.h"
#include "emit/gemm_kernel.h"
#include "emit/row_kernel.h"

namespace napkin::emit {

plan::Generates generates(SourceText src) {
  return [src = std::move(src)](plan::KernelKind kind, const ir::Diagram& kd) -> std::string {
    auto why = [](const Diagnostic& e) {
      return e.loc.line > 0 ? fmt::format("{}:{}: {}", e.loc.line, e.loc.column, e.message) : e.message;
    };
    switch (kind) {
      case plan::KernelKind::attention:
        if (auto f = recognise_attention(kd, src); !f) return why(f.error());
        return "";
      case plan::KernelKind::gemm: case plan::KernelKind::dual_gemm: case plan::KernelKind::gemm_reduction:
        if (auto f = recognise_gemm(kd, src); !f) return why(f.error());
        return "";
      case plan::KernelKind::row_reduction: case plan::KernelKind::column_reduction: case plan::KernelKind::elementwise:
        if (auto f = recognise_rows(kd, src); !f) return why(f.error());
        return "";
    }
    return "";
  };
}

}  // namespace napkin::emit
