// SPDX-License-Identifier: Apache-2.0
// napkin::attention_fwd_check refuses unsupported arguments with a message; runs without a GPU.
#include <cstdio>
#include <string>

#include "expect.h"
#include "napkin/attention.h"

namespace {

using napkin::runtime_test::expect;
using napkin::runtime_test::failures;

napkin::AttentionFwdArgs valid() {
  alignas(16) static char buf[64];
  napkin::AttentionFwdArgs a;
  a.batch = 2, a.heads_q = 8, a.heads_kv = 2, a.seqlen_q = 17, a.seqlen_k = 1000, a.head_dim = 128;
  a.q = a.k = a.v = buf;
  a.o = buf;
  for (int64_t* s : {&a.q_batch_stride, &a.k_batch_stride, &a.v_batch_stride, &a.o_batch_stride}) *s = 1 << 20;
  for (int64_t* s : {&a.q_seq_stride, &a.k_seq_stride, &a.v_seq_stride, &a.o_seq_stride}) *s = 1024;
  for (int64_t* s : {&a.q_head_stride, &a.k_head_stride, &a.v_head_stride, &a.o_head_stride}) *s = 128;
  a.softmax_scale = 0.088f;
  return a;
}

}  // namespace

int main() {
  std::string e = napkin::attention_fwd_check(valid());
  expect(e.empty(), "valid arguments", e);

  auto a = valid();
  for (int d : {8, 40, 96, 192, 256}) {
    a.head_dim = d;
    e = napkin::attention_fwd_check(a);
    expect(e.empty(), ("head_dim " + std::to_string(d)).c_str(), e);
  }
  for (int d : {0, 36, 264}) {
    a.head_dim = d;
    e = napkin::attention_fwd_check(a);
    expect(e == "head_dim must be a multiple of 8 from 8 to 256 (16-byte rows; WGMMA's widest N), got " + std::to_string(d),
           ("head_dim " + std::to_string(d)).c_str(), e);
  }

  a = valid();
  for (int d : {0, 64, 128, 192}) {  // 0: Q's
    a.head_dim_v = d;
    e = napkin::attention_fwd_check(a);
    expect(e.empty(), ("head_dim_v " + std::to_string(d)).c_str(), e);
  }
  a.head_dim_v = 100;
  e = napkin::attention_fwd_check(a);
  expect(e == "head_dim_v must be a multiple of 8 from 8 to 256 (16-byte rows; WGMMA's widest N), or 0 for head_dim's, got 100",
         "head_dim_v 100", e);

  a = valid();
  a.heads_kv = 3;
  e = napkin::attention_fwd_check(a);
  expect(e == "heads_q (8) must be a multiple of heads_kv (3)", "heads 8/3", e);

  a = valid();
  a.k_seq_stride = 130;
  e = napkin::attention_fwd_check(a);
  expect(e.rfind("k: batch/seq/head strides must be positive multiples of 8", 0) == 0, "k stride 130", e);

  a = valid();
  a.q = static_cast<const char*>(a.q) + 2;
  e = napkin::attention_fwd_check(a);
  expect(e == "q, k, v and o must be 16-byte aligned", "misaligned q", e);

  a = valid();
  a.seqlen_k = 0;
  e = napkin::attention_fwd_check(a);
  expect(e == "batch, seqlen_q, seqlen_k, heads_q and heads_kv must be >= 1", "seqlen_k 0", e);

  a = valid();
  a.softmax_scale = -1.f;
  e = napkin::attention_fwd_check(a);
  expect(e == "softmax_scale must be > 0", "negative scale", e);

  std::printf("%s\n", failures ? "runtime_check_args: FAILED" : "runtime_check_args: ok");
  return failures ? 1 : 0;
}
