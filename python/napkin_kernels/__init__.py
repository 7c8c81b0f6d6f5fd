# SPDX-License-Identifier: Apache-2.0
"""Kernels napkin generates from diagrams, called on torch tensors.

    import napkin_kernels as nk
    k = nk.build("examples/alibi.napkin")             # or nk.load("out/kernels/alibi")
    o = k(Q=q, K=k_, V=v, slope=slopes)               # tensors by the diagram's names
    o = k(q, k_, v, slopes)                           # or in the diagram's input order
    op = k.op()                                       # torch.ops.napkin.alibi, for torch.compile

`build` runs `napkin build` (the napkin binary: $NAPKIN_BIN, else build/release/bin/napkin in this
repository) on a .napkin path or on diagram text, and loads the library it writes. Each tensor
must have the dims the diagram declares, in that order, with any strides whose innermost (head
dim) is 1; sizes may differ from the diagram's except the head dims the kernel was built for.
The output is allocated in the axis order of the diagram's `out` line; a diagram with several
`out` lines returns a tuple of them in that order (`out=` takes a tuple). Errors name the tensor
and what was expected.
"""
import ctypes
import hashlib
import json
import os
import pathlib
import subprocess
import tempfile

_REPO = pathlib.Path(__file__).resolve().parents[2]
_MAX_RANK = 8
_DTYPE_CODES = {"f32": 0, "f16": 1, "bf16": 2, "i32": 3, "bool": 4, "f64": 5}
_OPS = {}  # torch.library operators registered in this process, by qualified name


class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p), ("dtype", ctypes.c_int32),
                ("rank", ctypes.c_int32), ("shape", ctypes.c_int64 * _MAX_RANK),
                ("strides", ctypes.c_int64 * _MAX_RANK)]


def _torch_dtype(name):
    import torch
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
            "bool": torch.bool, "f64": torch.float64}[name]


def napkin_binary():
    return pathlib.Path(os.environ.get("NAPKIN_BIN", _REPO / "build" / "release" / "bin" / "napkin"))


class Kernel:
    """A generated kernel library (libkernel.so) and its manifest.

    A call costs the CPU about as much as a torch operator: what depends only on the manifest
    (names, dtypes, the argument array's layout) is prepared once here, and a call fills in the
    tensors' pointers, shapes and strides. Calls on one Kernel from several threads at once
    share its error buffer."""

    def __init__(self, directory):
        self.directory = pathlib.Path(directory)
        lib_path = self.directory / "libkernel.so"
        if not lib_path.exists():
            raise FileNotFoundError(f"{lib_path}: no kernel library (run `napkin build ... -o {self.directory}`)")
        self._lib = ctypes.CDLL(str(lib_path.resolve()))
        self._lib.napkin_kernel_manifest.restype = ctypes.c_char_p
        self._lib.napkin_kernel_launch.restype = ctypes.c_int32
        self._lib.napkin_kernel_launch.argtypes = [ctypes.POINTER(_Tensor), ctypes.c_int32, ctypes.c_void_p,
                                                   ctypes.c_char_p, ctypes.c_int32]
        self.manifest = json.loads(self._lib.napkin_kernel_manifest().decode())
        self.inputs = self.manifest["inputs"]
        self.outputs = self.manifest["outputs"]
        self.output = self.outputs[0]
        self.params = {p["name"]: p["value"] for p in self.manifest.get("params", [])}
        self.name = pathlib.Path(self.manifest["diagram"]["file"]).stem
        # Prepared once: per tensor (inputs, then the outputs) its name, axes, torch dtype and code.
        specs = self.inputs + self.outputs
        self._input_names = [s["name"] for s in self.inputs]
        self._input_set = frozenset(self._input_names)
        self._names = [s["name"].encode() for s in specs]
        self._axes = [[a["name"] for a in s["axes"]] for s in specs]
        self._codes = [_DTYPE_CODES[s["dtype"]] for s in specs]
        self._torch_dtypes = None  # on the first call (importing torch is the caller's choice)
        self._out_axes = [[a["name"] for a in o["axes"]] for o in self.outputs]
        self._param_names = [n.encode() for n in self.params]
        self._array_type = _Tensor * (len(specs) + len(self.params))
        self._err = ctypes.create_string_buffer(1024)
        self._launch = self._lib.napkin_kernel_launch

    def __repr__(self):
        names = ", ".join(i["name"] for i in self.inputs)
        outs = ", ".join(o["name"] for o in self.outputs)
        return f"napkin_kernels.Kernel({self.name}({names}) -> {outs}: {self.manifest['fusion']})"

    def _check(self, spec, t):
        import torch
        name, want = spec["name"], [a["name"] for a in spec["axes"]]
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{self.name}: '{name}' must be a torch.Tensor [{' '.join(want)}] {spec['dtype']}, "
                            f"got {type(t).__name__}")
        if not t.is_cuda:
            raise ValueError(f"{self.name}: '{name}' must be on a CUDA device, got {t.device}")
        if t.dtype != _torch_dtype(spec["dtype"]):
            raise ValueError(f"{self.name}: '{name}' must be {spec['dtype']} ({_torch_dtype(spec['dtype'])}), got {t.dtype}")
        if t.dim() != len(want):
            raise ValueError(f"{self.name}: '{name}' must have {len(want)} dims [{' '.join(want)}], got shape "
                             f"{tuple(t.shape)}")

    def _ok(self, i, t, torch):
        """The fast form of _check: True when tensor i is a CUDA tensor of its dtype and rank."""
        return isinstance(t, torch.Tensor) and t.is_cuda and t.dtype is self._torch_dtypes[i] and t.dim() == len(self._axes[i])

    def __call__(self, *args, out=None, **tensors):
        """Inputs by position or name; params (the diagram's named constants) by name, as
        numbers, else the diagram's values."""
        import torch
        if self._torch_dtypes is None:
            self._torch_dtypes = [_torch_dtype(s["dtype"]) for s in self.inputs + self.outputs]
        params = {n: float(tensors.pop(n)) for n in list(tensors) if n in self.params} if self.params else {}
        n_in = len(self.inputs)
        if args:
            if len(args) > n_in:
                raise TypeError(f"{self.name}: {n_in} inputs, got {len(args)} positional tensors")
            for name, t in zip(self._input_names, args):
                if name in tensors:
                    raise TypeError(f"{self.name}: '{name}' given twice")
                tensors[name] = t
        if len(tensors) != n_in or not self._input_set.issuperset(tensors):
            unknown = sorted(set(tensors) - self._input_set)
            if unknown:
                raise TypeError(f"{self.name}: unknown tensor(s) {unknown}; the inputs are {self._input_names}"
                                + (f", the params {sorted(self.params)}" if self.params else ""))
            for spec in self.inputs:
                if spec["name"] not in tensors:
                    dims = " ".join(a["name"] for a in spec["axes"])
                    raise TypeError(f"{self.name}: missing tensor '{spec['name']}' [{dims}] {spec['dtype']}")
        values = [tensors[n] for n in self._input_names]
        sizes = {}
        for i, t in enumerate(values):
            if not self._ok(i, t, torch):
                self._check(self.inputs[i], t)
            for a, n in zip(self._axes[i], t.shape):
                sizes.setdefault(a, n)
        several = len(self.outputs) > 1
        if out is None:
            outs = [torch.empty([sizes[a] for a in axes], dtype=self._torch_dtypes[n_in + j], device=values[0].device)
                    for j, axes in enumerate(self._out_axes)]
        else:
            outs = list(out) if several else [out]
            if len(outs) != len(self.outputs):
                raise ValueError(f"{self.name}: out must hold {len(self.outputs)} tensors "
                                 f"({', '.join(o['name'] for o in self.outputs)}), got {len(outs)}")
            for j, t in enumerate(outs):
                if not self._ok(n_in + j, t, torch):
                    self._check(self.outputs[j], t)
                o_shape = [sizes[a] for a in self._out_axes[j]]
                if list(t.shape) != o_shape:
                    raise ValueError(f"{self.name}: out '{self.outputs[j]['name']}' must have shape {tuple(o_shape)}, "
                                     f"got {tuple(t.shape)}")
        values.extend(outs)
        arr = self._array_type()
        for i, t in enumerate(values):
            e = arr[i]
            e.name, e.data, e.dtype, e.rank = self._names[i], t.data_ptr(), self._codes[i], t.dim()
            e.shape[:e.rank] = t.shape
            e.strides[:e.rank] = t.stride()
        scalars = []
        for j, name in enumerate(self.params):
            if name not in params:
                continue
            scalars.append(ctypes.c_double(params[name]))
            e = arr[len(values) + len(scalars) - 1]
            e.name, e.data, e.dtype, e.rank = self._param_names[j], ctypes.addressof(scalars[-1]), _DTYPE_CODES["f64"], 0
        count = len(values) + len(scalars)
        device = outs[0].device.index
        if device is not None and device != torch.cuda.current_device():
            with torch.cuda.device(device):
                status = self._launch(arr, count, torch.cuda.current_stream().cuda_stream, self._err, len(self._err))
        else:
            status = self._launch(arr, count, torch.cuda.current_stream().cuda_stream, self._err, len(self._err))
        if status != 0:
            raise ValueError(f"{self.name}: {self._err.value.decode()}")
        return tuple(outs) if several else outs[0]

    def op(self, name=None):
        """This kernel as a PyTorch operator, torch.ops.napkin.<name> (torch.library.custom_op):
        opaque to torch.compile and torch.export, which take the output's shape and dtype from
        its fake implementation; checkable with torch.library.opcheck. Arguments: the inputs in
        the diagram's order, then the params as floats (the diagram's values by default). One
        registration per process and name."""
        import torch
        qual = f"napkin::{name or self.name}"
        if qual in _OPS:
            return _OPS[qual]
        n_in = len(self._input_names)
        params = list(self.params)
        schema = "(" + ", ".join([f"Tensor {n}" for n in self._input_names] +
                                 [f"float {n}={float(v)!r}" for n, v in self.params.items()]) + ") -> "
        schema += "Tensor" if len(self.outputs) == 1 else "(" + ", ".join(["Tensor"] * len(self.outputs)) + ")"

        def impl(*args):
            named = dict(zip(self._input_names, args[:n_in]))
            named.update(zip(params, args[n_in:]))
            return self(**named)

        def fake(*args):
            sizes = {}
            for axes, t in zip(self._axes, args[:n_in]):
                for a, n in zip(axes, t.shape):
                    sizes.setdefault(a, n)
            outs = [args[0].new_empty([sizes[a] for a in axes], dtype=_torch_dtype(o["dtype"]))
                    for axes, o in zip(self._out_axes, self.outputs)]
            return outs[0] if len(outs) == 1 else tuple(outs)

        op = torch.library.custom_op(qual, impl, mutates_args=(), device_types="cuda", schema=schema)
        op.register_fake(fake)
        _OPS[qual] = op
        return op


def load(directory):
    """The kernel `napkin build` wrote into `directory`."""
    return Kernel(directory)


def build(diagram, machine="h100-sxm5", out_dir=None, sets=(), napkin=None):
    """Builds (or takes from napkin's build cache) the kernel of `diagram`, a .napkin path or
    the diagram's text, and loads it."""
    if isinstance(sets, str):
        sets = [sets]
    if not str(diagram).strip():
        raise ValueError("build: the diagram is empty (expected a .napkin path or the diagram's text)")
    path = pathlib.Path(diagram) if "\n" not in str(diagram) else None
    if path is not None and path.is_dir():
        raise ValueError(f"build: {diagram} is a directory (expected a .napkin path or the diagram's text)")
    text = path.read_text() if path is not None and path.exists() else str(diagram)
    if path is None or not path.exists():
        if path is not None and str(diagram).endswith(".napkin"):
            raise FileNotFoundError(f"{diagram}: no such diagram")
        path = None
    if out_dir is None:
        # One directory per diagram text, machine and sizes: a library loaded once stays loaded
        # (dlopen returns it for its path), so another diagram must not reuse the path.
        key = hashlib.sha256("\0".join([text, machine, *sets]).encode()).hexdigest()[:16]
        out_dir = pathlib.Path(tempfile.gettempdir()) / "napkin_kernels" / f"{path.stem if path else 'diagram'}-{key}"
    if path is None:
        out_dir = pathlib.Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "diagram.napkin"
        path.write_text(text)
    cmd = [str(napkin or napkin_binary()), "build", str(path), "--machine", machine, "-o", str(out_dir)]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise ValueError(f"napkin build failed:\n{r.stderr.strip()}")
    return Kernel(out_dir)
