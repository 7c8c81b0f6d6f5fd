// SPDX-License-Identifier: Apache-2.0
// The launch's view of a GQA call: which query-side axis forms the tile's rows
// (napkin::with_larger_axis_as_rows) and the head strides the kernel reads
// (napkin::attention_args_from), for layouts users pass. Host code only: runs without a GPU.
#include <cstdio>
#include <string>

#include "expect.h"
#include "napkin/attention_kernel.h"

namespace {

using napkin::runtime_test::expect;
using napkin::runtime_test::failures;

struct Interchangeable : napkin::device::FusionDefaults {
  static constexpr bool kQueryAxesInterchangeable = true;
};
struct Fixed : napkin::device::FusionDefaults {};

// A contiguous tensor of `shape` (outermost first) named `name`.
napkin_tensor tensor(const char* name, std::initializer_list<int64_t> shape) {
  alignas(16) static char buf[64];
  napkin_tensor t{};
  t.name = name, t.data = buf, t.dtype = NAPKIN_BF16, t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t n : shape) t.shape[i++] = n;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) t.strides[d] = stride, stride *= t.shape[d];
  return t;
}

struct Call {
  std::string q_roles, o_roles;  // the roles the launch binds Q and O by
  napkin::AttentionFwdArgs args;
  std::string error;
};

// The spec the launch takes and the kernel's arguments for Q, K, V, O under it.
template <class Fusion>
Call bind(const napkin::AttentionSpec& declared, const napkin_tensor (&ts)[4]) {
  char q_roles[16], o_roles[16];
  const napkin::AttentionSpec spec = napkin::with_larger_axis_as_rows<Fusion>(declared, ts, 4, q_roles, o_roles);
  Call c{spec.q_roles, spec.o_roles, {}, {}};
  napkin::TensorBinder tb(ts, 4);
  const napkin_tensor* q = tb.bind(spec.q, NAPKIN_BF16, spec.q_roles);
  const napkin_tensor* k = tb.bind(spec.k, NAPKIN_BF16, spec.k_roles);
  const napkin_tensor* v = tb.bind(spec.v, NAPKIN_BF16, spec.v_roles);
  const napkin_tensor* o = tb.bind(spec.o, NAPKIN_BF16, spec.o_roles);
  c.error = tb.error().empty() ? napkin::attention_args_from(tb, q, spec.q_roles, k, spec.k_roles, v, spec.v_roles, o,
                                                             spec.o_roles, napkin::AttentionDType::kBF16, &c.args)
                               : tb.error();
  return c;
}

}  // namespace

int main() {
  // examples/gqa.napkin: Q[b g r q d] (roles b h g q d), K/V[b g k d], O[b q g r d]; 8 KV heads of 4.
  const napkin::AttentionSpec gqa{"Q", "bhgqd", "K", "bhkd", "V", "bhke", "O", "bqhge", 128, napkin::AttentionDType::kBF16, 1.f};
  {  // Decoding: one query, the group's 4 heads become the rows; the KV head stride stays 4 x d.
    const napkin_tensor ts[4] = {tensor("Q", {3, 8, 4, 1, 128}), tensor("K", {3, 8, 500, 128}),
                                 tensor("V", {3, 8, 500, 128}), tensor("O", {3, 1, 8, 4, 128})};
    const Call c = bind<Interchangeable>(gqa, ts);
    expect(c.q_roles == "bhqgd" && c.o_roles == "bghqe", "decoding: group as rows",
           c.q_roles);
    expect(c.error.empty() && c.args.seqlen_q == 4 && c.args.heads_q == 8 && c.args.heads_kv == 8, "decoding: 4 rows, 8 heads",
           c.error);
    expect(c.args.q_head_stride == 4 * 128 && c.args.q_seq_stride == 128 && c.args.o_head_stride == 4 * 128 &&
               c.args.o_seq_stride == 128,
           "decoding: the KV head's stride, not the one-query axis's", std::to_string(c.args.q_head_stride));
    const Call fixed = bind<Fixed>(gqa, ts);
    expect(fixed.q_roles == "bhgqd" && fixed.args.seqlen_q == 1 && fixed.args.heads_q == 32,
           "fused code reading q or g: the build's roles kept", fixed.q_roles);
  }
  {  // Prefill: the query axis is already the larger; nothing changes.
    const napkin_tensor ts[4] = {tensor("Q", {3, 8, 4, 300, 128}), tensor("K", {3, 8, 500, 128}),
                                 tensor("V", {3, 8, 500, 128}), tensor("O", {3, 300, 8, 4, 128})};
    const Call c = bind<Interchangeable>(gqa, ts);
    expect(c.q_roles == "bhgqd" && c.error.empty() && c.args.seqlen_q == 300 && c.args.heads_q == 32 &&
               c.args.q_head_stride == 300 * 128,
           "prefill: roles as built", c.error);
  }
  {  // Three queries in Q[b g r q d]: the queries cannot merge with the KV heads, so no exchange.
    const napkin_tensor ts[4] = {tensor("Q", {3, 8, 4, 3, 128}), tensor("K", {3, 8, 500, 128}),
                                 tensor("V", {3, 8, 500, 128}), tensor("O", {3, 3, 8, 4, 128})};
    const Call c = bind<Interchangeable>(gqa, ts);
    expect(c.q_roles == "bhgqd" && c.error.empty() && c.args.seqlen_q == 3, "3 queries: roles as built",
           c.error);
  }
  // tests/diagrams/gqa_decode.napkin built at q = 1: Q[b q g r d] with the one query as the group
  // (roles b g h q d). A group of one takes the KV head's stride; at 200 queries the rows exchange
  // back, the group of 4 heads merging with the KV heads (stride 4 x d = 4 x 128).
  const napkin::AttentionSpec decode{"Q", "bghqd", "K", "bkhd", "V", "bkhe", "O", "bghqe", 128, napkin::AttentionDType::kBF16, 1.f};
  for (const int64_t queries : {int64_t{1}, int64_t{200}}) {
    const napkin_tensor ts[4] = {tensor("Q", {2, queries, 8, 4, 128}), tensor("K", {2, 700, 8, 128}),
                                 tensor("V", {2, 700, 8, 128}), tensor("O", {2, queries, 8, 4, 128})};
    const Call c = bind<Interchangeable>(decode, ts);
    const int64_t rows = queries == 1 ? 4 : queries, row_stride = queries == 1 ? 128 : 8 * 4 * 128;
    expect(c.error.empty() && c.args.seqlen_q == rows && c.args.heads_q == (queries == 1 ? 8 : 32) &&
               c.args.q_seq_stride == row_stride && c.args.q_head_stride == (queries == 1 ? 4 * 128 : 128) &&
               c.args.k_head_stride == 128 && c.args.k_seq_stride == 8 * 128,
           "gqa_decode's strides", c.error + " rows " + std::to_string(c.args.seqlen_q) + " head stride " +
                                       std::to_string(c.args.q_head_stride));
  }
  if (failures == 0) std::printf("query_roles: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
