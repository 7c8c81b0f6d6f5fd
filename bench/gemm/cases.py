# SPDX-License-Identifier: Apache-2.0
"""The GEMM-family benchmark's cases: a diagram and the sizes bound for it (napkin build --set).

    python3 bench/gemm/cases.py            # one line per case: name, diagram, sets
"""
LLAMA3_8B = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 14336), "down": (14336, 4096)}

CASES = []  # (name, diagram path, [sets], family)
for s in (4096, 8192):
    CASES.append((f"gemm_{s}", "examples/matmul.napkin", [f"m={s}", f"k={s}", f"n={s}"], "gemm"))
for tokens in (1024, 4096, 16384):
    for proj, (k, n) in LLAMA3_8B.items():
        CASES.append((f"llama3_{proj}_{tokens}", "examples/matmul.napkin", [f"m={tokens}", f"k={k}", f"n={n}"], "gemm"))
for tokens in (2048, 8192):
    # The SwiGLU MLP's down projection alone (LLaMA-7B's f = 11008): its share of the MLP's time.
    CASES.append((f"gemm_swiglu_down_{tokens}", "examples/matmul.napkin", [f"m={tokens}", "k=11008", "n=4096"], "gemm"))
for tokens in (2048, 8192):
    CASES.append((f"swiglu_mlp_{tokens}", "examples/swiglu_mlp.napkin", [f"t={tokens}"], "plan"))
    CASES.append((f"rmsnorm_matmul_{tokens}", "examples/rmsnorm_matmul.napkin", [f"t={tokens}"], "plan"))
    CASES.append((f"layernorm_{tokens}", "examples/layernorm.napkin", [f"t={tokens}"], "plan"))
    CASES.append((f"gelu_mlp_{tokens}", "examples/gelu_mlp.napkin", [f"t={tokens}"], "plan"))
CASES.append(("matmul_chain_4096", "examples/matmul_chain.napkin", [], "plan"))
CASES.append(("linear_attention", "examples/linear_attention.napkin", [], "plan"))
CASES.append(("normalised_linear_attention", "examples/normalised_linear_attention.napkin", [], "plan"))
# A scale before a compute-bound GEMM (8192 x 4096 x 4096): fused as the GEMM's prologue or
# materialised, as the solver decides.
CASES.append(("scaled_projection", "tests/diagrams/scaled_projection.napkin", [], "plan"))
# Small prologue GEMMs (a few tiles, one or two K tiles): launches whose start-up the estimate counts.
CASES.append(("normalised_projection", "tests/diagrams/normalised_projection.napkin", [], "plan"))
CASES.append(("gated_softplus", "tests/diagrams/gated_softplus.napkin", [], "plan"))
for tokens in (2048, 8192):
    # A language model's head and its loss (Llama 3's 128256-token vocabulary, e = 4096), the
    # logits folded in the GEMM's epilogue: against PyTorch's linear + cross_entropy.
    CASES.append((f"linear_cross_entropy_{tokens}", "examples/linear_cross_entropy.napkin", [f"t={tokens}"], "plan"))
for tokens in (2048, 8192):
    # SwiGLU's gate and up projections with biases (Llama 3 8B's e = 4096, f = 14336): one dual GEMM
    # reading both bias rows in its epilogue.
    CASES.append((f"biased_swiglu_{tokens}", "tests/diagrams/biased_swiglu.napkin", ["x=1", f"t={tokens}", "e=4096", "f=14336"],
                  "plan"))
for columns in (512, 4096):
    # A reduction down the columns of X[t c] (batch statistics; t = 32768, the diagram's count):
    # a column kernel.
    CASES.append((f"column_variance_c{columns}", "tests/diagrams/column_variance.napkin", [f"c={columns}"], "plan"))
# Reductions no row kernel takes as written: a loss over every axis of 8 x 4096 x 4096 (cut so that
# its first reduction fills the GPU), soft-argmax over a 64 x 64 heatmap (one reduction per axis).
CASES.append(("squared_error_loss", "tests/diagrams/squared_error_loss.napkin", [], "plan"))
CASES.append(("soft_argmax", "tests/diagrams/soft_argmax.napkin", [], "plan"))
# Few output tiles over a long K (a weight gradient over 131072 tokens): stream-K over every SM.
CASES.append(("weight_gradient", "tests/diagrams/weight_gradient.napkin", [], "gemm"))
# One output tile over a 1M-long K (split-K: the K axis cut in two, partial products added by a
# second kernel), and the squared global norm of a flat 16M gradient (one sum over one axis, cut).
CASES.append(("long_k_product", "tests/diagrams/long_k_product.napkin", [], "gemm"))
CASES.append(("global_norm", "tests/diagrams/global_norm.napkin", [], "plan"))
# Masked mean pooling of 64 x 512 x 768 token embeddings: one column kernel reading the mask per token.
CASES.append(("masked_mean_pool", "tests/diagrams/masked_mean_pool.napkin", [], "plan"))
# BatchNorm of an NCHW activation written out (X - mean recomputed where it is read).
CASES.append(("batchnorm_nchw", "tests/diagrams/batchnorm_nchw.napkin", [], "plan"))

if __name__ == "__main__":
    for name, path, sets, family in CASES:
        print(name, path, " ".join(sets))
