// SPDX-License-Identifier: Apache-2.0
// napkin::TensorBinder::aux: an auxiliary tensor's row and key strides are 32-bit in the kernel
// (AuxView); a larger stride is refused with a message naming the tensor, never truncated.
// Host code only: runs without a GPU.
#include <cstdio>
#include <string>

#include "expect.h"
#include "napkin/tensor_binder.h"

namespace {

using napkin::runtime_test::expect;
using napkin::runtime_test::failures;

napkin_tensor mask(int64_t key_stride) {
  alignas(16) static char buf[64];
  napkin_tensor t{};
  t.name = "keep", t.data = buf, t.dtype = NAPKIN_BOOL, t.rank = 2;
  t.shape[0] = 2, t.shape[1] = 1000;
  t.strides[0] = 1000 * key_stride, t.strides[1] = key_stride;
  return t;
}

}  // namespace

int main() {
  for (const int64_t stride : {int64_t{1}, int64_t{3}, int64_t{0}, (int64_t{1} << 31) - 1, -(int64_t{1} << 31)}) {
    const napkin_tensor t = mask(stride);
    napkin::TensorBinder tb(&t, 1);
    const auto view = tb.aux<bool, napkin::kAuxB | napkin::kAuxK>(tb.bind("keep", NAPKIN_BOOL, "bk"), "bk");
    expect(tb.error().empty() && view.sk == stride && view.sb == 1000 * stride, "32-bit key stride kept", tb.error());
  }
  for (const int64_t stride : {int64_t{1} << 31, int64_t{1} << 40, -(int64_t{1} << 31) - 1}) {
    const napkin_tensor t = mask(stride);
    napkin::TensorBinder tb(&t, 1);
    tb.aux<bool, napkin::kAuxB | napkin::kAuxK>(tb.bind("keep", NAPKIN_BOOL, "bk"), "bk");
    expect(tb.error().find("tensor 'keep'") != std::string::npos && tb.error().find("key axis") != std::string::npos &&
               tb.error().find(std::to_string(stride)) != std::string::npos,
           "stride past 32 bits refused, naming the tensor, the axis and the stride", tb.error());
  }
  if (failures == 0) std::printf("tensor_binder: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
