/* SPDX-License-Identifier: Apache-2.0
 * The C interface of a kernel napkin generates (`napkin build`): a shared library exporting
 * napkin_kernel_manifest and napkin_kernel_launch. Plain C, so that napkin's CUDA-free core
 * (dlopen) and Python (ctypes) load it alike. Tensors are passed by name, with their shape and
 * element strides in the axis order the diagram declares them; an output is a tensor too. */
#ifndef NAPKIN_KERNEL_ABI_H
#define NAPKIN_KERNEL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NAPKIN_KERNEL_ABI_VERSION 1
#define NAPKIN_MAX_RANK 8

/* Element types, as the diagram names them. A param (a named constant of the diagram, e.g. a
 * window size) may be passed as a rank-0 NAPKIN_F64 tensor whose data points to HOST memory;
 * absent, it keeps the diagram's value. */
enum napkin_dtype { NAPKIN_F32 = 0, NAPKIN_F16 = 1, NAPKIN_BF16 = 2, NAPKIN_I32 = 3, NAPKIN_BOOL = 4, NAPKIN_F64 = 5 };

typedef struct {
  const char* name;  /* the diagram's input or output name */
  void* data;        /* device memory */
  int32_t dtype;     /* napkin_dtype */
  int32_t rank;
  int64_t shape[NAPKIN_MAX_RANK];
  int64_t strides[NAPKIN_MAX_RANK]; /* in elements */
} napkin_tensor;

/* The kernel's manifest.json, as written beside it (inputs, outputs, axes, schedule). */
typedef const char* (*napkin_kernel_manifest_fn)(void);
/* Checks the tensors and launches on `stream` (a cudaStream_t; null: the default stream).
 * Returns 0, or 1 with a message in err (naming the tensor and what was expected). */
typedef int32_t (*napkin_kernel_launch_fn)(const napkin_tensor* tensors, int32_t count, void* stream, char* err,
                                           int32_t err_len);
/* The ABI version the library was built against (NAPKIN_KERNEL_ABI_VERSION). */
typedef int32_t (*napkin_kernel_abi_version_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
