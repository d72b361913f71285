"""Running a SavedModel through TF Serving's loader without the server: the C harness.

`build_harness` compiles `bert_tf/export/c/serving_harness.c` with gcc against the TensorFlow C
API of the installed wheel (`libtensorflow_cc.so.2` + `libtensorflow_framework.so.2`, headers in
`tensorflow/include`). The harness loads a SavedModel with `TF_LoadSessionFromSavedModel` (the
C++ `LoadSavedModel` that tensorflow_model_server uses), registers the tensorflow-text kernels
with `TF_LoadLibrary` (the server links the same `ops_lib` in statically), and runs a signature
by its tensor names read from `saved_model.pb`, as the server's Predict handler does.

`run_signature` runs a list of requests in one loader process and returns per request either the
named outputs (numpy arrays) or the error message; `bench_signature` runs the same requests from
N threads against one loaded session and returns latency percentiles and QPS.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from typing import Mapping, Sequence

import numpy as np

HARNESS_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c", "serving_harness.c")

# TF_DataType enum values (tensorflow/c/tf_datatype.h) for the dtypes signatures use here.
_TF_DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 6: np.int8, 7: object,
              9: np.int64, 10: np.bool_}
_NP_TO_TF = {np.dtype(np.float32): 1, np.dtype(np.float64): 2, np.dtype(np.int32): 3,
             np.dtype(np.uint8): 4, np.dtype(np.int8): 6, np.dtype(np.int64): 9,
             np.dtype(np.bool_): 10}
_TF_STRING = 7
_MAGIC = b"BTR1"


class HarnessUnavailable(RuntimeError):
    """gcc, the TensorFlow C API headers or libraries are missing (the message says which)."""


@dataclasses.dataclass(frozen=True)
class TensorflowCApi:
    """Where the installed wheel keeps the C API."""

    include_dir: str
    library_dir: str


def find_tensorflow_c_api() -> TensorflowCApi:
    """Locates the headers and shared libraries of the installed `tensorflow` wheel.

    Raises:
      HarnessUnavailable: naming what is missing.
    """
    import tensorflow as tf  # Only its location is needed.

    tf_dir = os.path.dirname(os.path.abspath(tf.__file__))
    include = os.path.join(tf_dir, "include")
    header = os.path.join(include, "tensorflow", "c", "c_api.h")
    if not os.path.exists(header):
        raise HarnessUnavailable(f"the TensorFlow C API header {header} is missing from the "
                                 "installed wheel")
    for lib in ("libtensorflow_cc.so.2", "libtensorflow_framework.so.2"):
        if not os.path.exists(os.path.join(tf_dir, lib)):
            raise HarnessUnavailable(f"{lib} is missing from {tf_dir}")
    return TensorflowCApi(include_dir=include, library_dir=tf_dir)


def tensorflow_text_op_libraries() -> list[str]:
    """The tensorflow-text kernel libraries (`tensorflow_text/python/ops/_*.so`), sorted."""
    import tensorflow_text

    ops_dir = os.path.join(os.path.dirname(os.path.abspath(tensorflow_text.__file__)),
                           "python", "ops")
    libraries = sorted(glob.glob(os.path.join(ops_dir, "_*.so")))
    if not libraries:
        raise HarnessUnavailable(f"no tensorflow-text op libraries (_*.so) in {ops_dir}")
    return libraries


def build_harness(output_dir: str | os.PathLike, compiler: str = "gcc") -> str:
    """Compiles the harness into `output_dir`; returns the executable's path.

    Raises:
      HarnessUnavailable: no compiler or no C API in the wheel.
      RuntimeError: the compiler failed (its output is in the message).
    """
    cc = shutil.which(compiler)
    if cc is None:
        raise HarnessUnavailable(f"no C compiler {compiler!r} on PATH")
    api = find_tensorflow_c_api()
    output_dir = os.fspath(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    exe = os.path.join(output_dir, "serving_harness")
    cmd = [cc, "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall",
           f"-I{api.include_dir}", HARNESS_SOURCE, "-o", exe, f"-L{api.library_dir}",
           "-l:libtensorflow_cc.so.2", "-l:libtensorflow_framework.so.2",
           f"-Wl,-rpath,{api.library_dir}", "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {HARNESS_SOURCE} failed:\n{' '.join(cmd)}\n{proc.stderr}")
    return exe


@dataclasses.dataclass(frozen=True)
class SignatureTensors:
    """Tensor names of one signature: input/output key -> "op:index" in the graph."""

    inputs: dict[str, str]
    outputs: dict[str, str]


def signature_tensors(export_dir: str | os.PathLike, signature: str = "serving_default",
                      tag: str = "serve") -> SignatureTensors:
    """Reads the signature's tensor names from `saved_model.pb` (as the server does)."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(os.fspath(export_dir), "saved_model.pb")
    sm = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        sm.ParseFromString(f.read())
    for meta_graph in sm.meta_graphs:
        if tag in meta_graph.meta_info_def.tags:
            if signature not in meta_graph.signature_def:
                raise KeyError(f"{path} has no signature {signature!r}; it has "
                               f"{sorted(meta_graph.signature_def)}")
            sig = meta_graph.signature_def[signature]
            return SignatureTensors(inputs={k: v.name for k, v in sig.inputs.items()},
                                    outputs={k: v.name for k, v in sig.outputs.items()})
    raise KeyError(f"{path} has no MetaGraph tagged {tag!r}")


def _write_tensor(out: list[bytes], name: str, value: np.ndarray) -> None:
    encoded = name.encode()
    out.append(struct.pack("<I", len(encoded)) + encoded)
    if value.dtype.kind in "OSU":
        out.append(struct.pack("<II", _TF_STRING, value.ndim))
        out.append(struct.pack(f"<{value.ndim}q", *value.shape))
        for item in value.reshape(-1):
            data = item.encode() if isinstance(item, str) else bytes(item)
            out.append(struct.pack("<Q", len(data)) + data)
    else:
        if value.dtype not in _NP_TO_TF:
            raise TypeError(f"dtype {value.dtype} is not supported by the harness")
        out.append(struct.pack("<II", _NP_TO_TF[value.dtype], value.ndim))
        out.append(struct.pack(f"<{value.ndim}q", *value.shape))
        out.append(np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes())


def encode_requests(requests: Sequence[Mapping[str, np.ndarray]]) -> bytes:
    """Requests ({tensor name: array}) -> the harness's request file contents."""
    out = [_MAGIC, struct.pack("<I", len(requests))]
    for request in requests:
        out.append(struct.pack("<I", len(request)))
        for name, value in request.items():
            _write_tensor(out, name, np.asarray(value))
    return b"".join(out)


def decode_responses(data: bytes) -> list[dict[str, np.ndarray] | str]:
    """The harness's response file -> per request {fetch name: array} or the error message."""
    if data[:4] != _MAGIC:
        raise ValueError("not a harness response file")
    pos = 4

    def take(fmt: str):
        nonlocal pos
        values = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return values

    (count,) = take("<I")
    responses: list[dict[str, np.ndarray] | str] = []
    for _ in range(count):
        code, msg_len = take("<II")
        message = data[pos:pos + msg_len].decode("utf-8", "replace")
        pos += msg_len
        (num_tensors,) = take("<I")
        tensors = {}
        for _ in range(num_tensors):
            (name_len,) = take("<I")
            name = data[pos:pos + name_len].decode()
            pos += name_len
            dtype, ndims = take("<II")
            shape = take(f"<{ndims}q")
            size = int(np.prod(shape)) if ndims else 1
            if dtype == _TF_STRING:
                items = []
                for _ in range(size):
                    (n,) = take("<Q")
                    items.append(data[pos:pos + n])
                    pos += n
                tensors[name] = np.array(items, dtype=object).reshape(shape)
            else:
                np_dtype = np.dtype(_TF_DTYPES[dtype]).newbyteorder("<")
                nbytes = size * np_dtype.itemsize
                tensors[name] = np.frombuffer(data, np_dtype, size, pos).reshape(shape).copy()
                pos += nbytes
        responses.append(tensors if code == 0 else f"[code {code}] {message}")
    return responses


def _harness_args(harness: str, export_dir: str, requests_path: str, fetch: Sequence[str],
                  libraries: Sequence[str] | None) -> list[str]:
    args = [harness, "--export_dir", os.fspath(export_dir), "--tag", "serve",
            "--requests", requests_path]
    for lib in (tensorflow_text_op_libraries() if libraries is None else libraries):
        args += ["--library", lib]
    for name in fetch:
        args += ["--fetch", name]
    return args


def _to_tensor_names(tensors: SignatureTensors, request: Mapping[str, np.ndarray]
                     ) -> dict[str, np.ndarray]:
    unknown = set(request) - set(tensors.inputs)
    if unknown:
        raise KeyError(f"inputs {sorted(unknown)} are not in the signature (it takes "
                       f"{sorted(tensors.inputs)})")
    return {tensors.inputs[k]: np.asarray(v) for k, v in request.items()}


def run_signature(harness: str, export_dir: str | os.PathLike,
                  requests: Sequence[Mapping[str, np.ndarray]],
                  signature: str = "serving_default", libraries: Sequence[str] | None = None,
                  timeout: float = 300) -> tuple[list[dict[str, np.ndarray] | str],
                                                 subprocess.CompletedProcess]:
    """Runs `requests` (input key -> array) through one loader process.

    Args:
      harness: executable from `build_harness`.
      export_dir: a SavedModel folder (one version).
      requests: per request, the signature's input keys -> arrays (all keys of the signature;
        a key may also be given as a raw "op:index" tensor name to feed something unusual).
      signature: signature key.
      libraries: op libraries to load (default: all tensorflow-text kernel libraries).

    Returns:
      (responses, completed process): per request {output key: array} or an error string; the
      process (its `returncode` is negative if a signal killed it).
    """
    export_dir = os.fspath(export_dir)
    tensors = signature_tensors(export_dir, signature)
    fetch_keys = sorted(tensors.outputs)
    encoded = []
    for request in requests:
        named = {}
        for key, value in request.items():
            named.update(_to_tensor_names(tensors, {key: value}) if key in tensors.inputs
                         else {key: np.asarray(value)})
        encoded.append(named)
    with tempfile.TemporaryDirectory(prefix="serving_harness_") as tmp:
        req_path = os.path.join(tmp, "requests.bin")
        resp_path = os.path.join(tmp, "responses.bin")
        with open(req_path, "wb") as f:
            f.write(encode_requests(encoded))
        args = _harness_args(harness, export_dir, req_path,
                             [tensors.outputs[k] for k in fetch_keys], libraries)
        proc = subprocess.run(args + ["--responses", resp_path], capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0 or not os.path.exists(resp_path):
            return [], proc
        with open(resp_path, "rb") as f:
            raw = decode_responses(f.read())
    by_tensor = {tensors.outputs[k]: k for k in fetch_keys}
    responses = [r if isinstance(r, str) else {by_tensor[n]: v for n, v in r.items()}
                 for r in raw]
    return responses, proc


def bench_signature(harness: str, export_dir: str | os.PathLike,
                    requests: Sequence[Mapping[str, np.ndarray]], threads: int = 8,
                    iterations: int = 500, signature: str = "serving_default",
                    libraries: Sequence[str] | None = None, timeout: float = 3600) -> dict:
    """`threads` threads x `iterations` requests (cycling through `requests`) on one session.

    Returns:
      The harness's JSON: threads, requests, errors, load_s, wall_s, p50_ms, p99_ms, max_ms,
      qps, first_error.
    """
    export_dir = os.fspath(export_dir)
    tensors = signature_tensors(export_dir, signature)
    encoded = [_to_tensor_names(tensors, r) for r in requests]
    with tempfile.TemporaryDirectory(prefix="serving_harness_") as tmp:
        req_path = os.path.join(tmp, "requests.bin")
        with open(req_path, "wb") as f:
            f.write(encode_requests(encoded))
        args = _harness_args(harness, export_dir, req_path,
                             [tensors.outputs[k] for k in sorted(tensors.outputs)], libraries)
        args += ["--bench_threads", str(threads), "--bench_iterations", str(iterations)]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"serving_harness exited with {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":  # pragma: no cover - manual use: build the harness into a folder.
    print(build_harness(sys.argv[1] if len(sys.argv) > 1 else "."))
