// SPDX-License-Identifier: Apache-2.0
// Thin PyTorch binding of napkin::attention_fwd: tensors in, tensors out, no logic of its own
// beyond reading shapes and strides.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <optional>
#include <vector>

#include "napkin/attention.h"

namespace {

// q: (b, s_q, h_q, d), k, v: (b, s_k, h_kv, d), any strides with a unit d stride.
// Returns (o, lse): o like q (its strides when q is dense), lse (b, h_q, s_q) f32.
std::vector<at::Tensor> attention_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      double softmax_scale, bool causal, std::optional<at::Tensor> out,
                                      std::optional<at::Tensor> lse_out, bool pingpong) {
  TORCH_CHECK(q.is_cuda() && k.is_cuda() && v.is_cuda(), "napkin_attention: q, k, v must be CUDA tensors");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "napkin_attention: q, k, v must be 4-D (b, s, h, d)");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "napkin_attention: q, k, v must share a dtype");
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf,
              "napkin_attention: dtype must be bfloat16 or float16, got ", q.scalar_type());
  TORCH_CHECK(k.sizes() == v.sizes(), "napkin_attention: k and v must have the same shape");
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3), "napkin_attention: batch and head_dim of q and k differ");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1, "napkin_attention: head_dim must be contiguous");
  const c10::cuda::CUDAGuard guard(q.device());

  at::Tensor o = out.has_value() ? *out : at::empty_like(q);
  TORCH_CHECK(o.sizes() == q.sizes() && o.scalar_type() == q.scalar_type() && o.stride(3) == 1,
              "napkin_attention: out must have q's shape and dtype and a contiguous head_dim");
  at::Tensor lse = lse_out.has_value() ? *lse_out
                                       : at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
  TORCH_CHECK(lse.is_contiguous() && lse.scalar_type() == at::kFloat &&
                  lse.sizes() == at::IntArrayRef({q.size(0), q.size(2), q.size(1)}),
              "napkin_attention: lse must be a contiguous f32 (b, h, s_q) tensor");

  napkin::AttentionFwdArgs a;
  a.dtype = q.scalar_type() == at::kBFloat16 ? napkin::AttentionDType::kBF16 : napkin::AttentionDType::kF16;
  a.batch = q.size(0), a.seqlen_q = q.size(1), a.heads_q = q.size(2), a.head_dim = q.size(3);
  a.seqlen_k = k.size(1), a.heads_kv = k.size(2);
  a.q = q.data_ptr(), a.k = k.data_ptr(), a.v = v.data_ptr(), a.o = o.data_ptr();
  a.lse = lse.data_ptr<float>();
  a.q_batch_stride = q.stride(0), a.q_seq_stride = q.stride(1), a.q_head_stride = q.stride(2);
  a.k_batch_stride = k.stride(0), a.k_seq_stride = k.stride(1), a.k_head_stride = k.stride(2);
  a.v_batch_stride = v.stride(0), a.v_seq_stride = v.stride(1), a.v_head_stride = v.stride(2);
  a.o_batch_stride = o.stride(0), a.o_seq_stride = o.stride(1), a.o_head_stride = o.stride(2);
  a.softmax_scale = static_cast<float>(softmax_scale);
  a.causal = causal;
  a.pingpong = pingpong;
  const std::string err = napkin::attention_fwd(a, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err.empty(), "napkin_attention: ", err);
  return {o, lse};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("attention_fwd", &attention_fwd, "napkin fused attention forward (sm_90a)", py::arg("q"), py::arg("k"),
        py::arg("v"), py::arg("softmax_scale"), py::arg("causal"), py::arg("out") = py::none(),
        py::arg("lse") = py::none(), py::arg("pingpong") = true);
}
