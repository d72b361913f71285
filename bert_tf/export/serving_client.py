"""Clients for TF Serving's Predict API: REST (JSON) and gRPC (tensorflow-serving-api), and the
same request answered from a SavedModel folder without a server (`saved_model_predict`).

Request building and response parsing are plain functions (testable without a server):

  body = rest_request_body({"text": ["a great movie", "dull"]}, fmt="instances")
  # {"signature_name": "serving_default", "instances": [{"text": "a great movie"}, ...]}
  outputs = parse_rest_response(json.loads(reply), fmt="instances")  # {name: np.ndarray}

Strings that are not valid UTF-8 (bytes) — or all strings with `b64=True` — are sent as
`{"b64": "<base64>"}`, which TF Serving decodes into the DT_STRING tensor.

`saved_model_predict(dir, inputs)` loads `<dir>` (a version folder, or a model base path whose
highest version is taken) with tensorflow-text's ops registered, runs the signature on the same
inputs (numbers cast to the signature's dtypes, as the REST API does) and returns the same
{output name: array}. A connection failure names the URL (REST) or address (gRPC) tried.
"""
from __future__ import annotations

import base64
import json
import os
import socket
import urllib.error
import urllib.request
from typing import Any, Mapping, Sequence

import numpy as np

REST_FORMATS = ("instances", "inputs")


class ServingError(RuntimeError):
    """The server answered with an error (its message is kept verbatim)."""


def _json_value(value: Any, b64: bool) -> Any:
    """numpy/python value -> JSON-able value (strings maybe as {"b64": ...})."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "OSU":
            return [_json_value(v, b64) for v in value.tolist()]
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_json_value(v, b64) for v in value]
    if isinstance(value, bytes):
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode("ascii")}
        return {"b64": base64.b64encode(value).decode("ascii")} if b64 else text
    if isinstance(value, str):
        return {"b64": base64.b64encode(value.encode("utf-8")).decode("ascii")} if b64 else value
    if isinstance(value, np.generic):
        return value.item()
    return value


def _batch_size(inputs: Mapping[str, Any]) -> int:
    sizes = {k: len(v) for k, v in inputs.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"all inputs need the same batch size; got {sizes}")
    return next(iter(sizes.values()))


def rest_request_body(inputs: Mapping[str, Sequence[Any] | np.ndarray],
                      signature_name: str = "serving_default", fmt: str = "instances",
                      b64: bool = False) -> dict:
    """The JSON body of a REST :predict request.

    Args:
      inputs: signature input name -> batch of values (first dimension = batch), e.g.
        {"text": ["..."]} or {"input_word_ids": [[101, ...]], ...}.
      signature_name: signature to run.
      fmt: "instances" (row format: one object per example) or "inputs" (columnar format).
      b64: send every string base64-encoded ({"b64": ...}); bytes that are not valid UTF-8 are
        always sent that way.

    Returns:
      A dict to serialize with json.dumps.
    """
    if fmt not in REST_FORMATS:
        raise ValueError(f"fmt must be one of {REST_FORMATS}, got {fmt!r}")
    if not inputs:
        raise ValueError("a request needs at least one input")
    body: dict[str, Any] = {"signature_name": signature_name}
    if fmt == "inputs":
        body["inputs"] = {k: _json_value(v, b64) for k, v in inputs.items()}
        return body
    n = _batch_size(inputs)
    columns = {k: _json_value(v, b64) for k, v in inputs.items()}
    body["instances"] = [{k: columns[k][i] for k in columns} for i in range(n)]
    return body


def _from_json(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, str):
        return value.encode("utf-8")
    return value


def _to_array(values: Any) -> np.ndarray:
    values = _from_json(values)
    array = np.array(values)
    if array.dtype.kind == "S":  # Keep bytes as objects, as TensorFlow returns tf.string.
        array = np.array(values, dtype=object)
    return array


def parse_rest_response(response: Mapping[str, Any], fmt: str = "instances",
                        output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """A REST :predict reply (parsed JSON) -> {output name: array with the batch first}.

    Args:
      response: json.loads of the reply.
      fmt: the request's format ("instances" replies carry "predictions", "inputs" replies
        "outputs").
      output_names: for a signature with a single output the server drops its name; give the
        name here (default "output").

    Raises:
      ServingError: the reply is {"error": ...}.
    """
    if "error" in response:
        raise ServingError(str(response["error"]))
    single = (output_names or ["output"])[0]
    if fmt == "instances":
        if "predictions" not in response:
            raise ValueError(f"a reply to an 'instances' request needs 'predictions'; got keys "
                             f"{sorted(response)}")
        rows = response["predictions"]
        if rows and isinstance(rows[0], dict) and not (set(rows[0]) == {"b64"}):
            return {k: _to_array([row[k] for row in rows]) for k in rows[0]}
        return {single: _to_array(rows)}
    if "outputs" not in response:
        raise ValueError(f"a reply to an 'inputs' request needs 'outputs'; got keys "
                         f"{sorted(response)}")
    outputs = response["outputs"]
    if isinstance(outputs, dict) and not set(outputs) == {"b64"}:
        return {k: _to_array(v) for k, v in outputs.items()}
    return {single: _to_array(outputs)}


def rest_predict_url(server: str, model_name: str, version: int | None = None) -> str:
    """http://host:8501/v1/models/<name>[/versions/<v>]:predict"""
    base = server if server.startswith(("http://", "https://")) else f"http://{server}"
    path = f"/v1/models/{model_name}" + (f"/versions/{int(version)}" if version else "")
    return base.rstrip("/") + path + ":predict"


def rest_predict(server: str, model_name: str, inputs: Mapping[str, Any],
                 signature_name: str = "serving_default", version: int | None = None,
                 fmt: str = "instances", b64: bool = False, timeout: float = 30.0
                 ) -> dict[str, np.ndarray]:
    """POSTs a Predict request to TF Serving's REST port; returns {output name: array}."""
    body = json.dumps(rest_request_body(inputs, signature_name, fmt, b64)).encode("utf-8")
    request = urllib.request.Request(rest_predict_url(server, model_name, version), data=body,
                                     headers={"Content-Type": "application/json"})
    url = request.full_url
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            text = reply.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:  # The server puts {"error": ...} in the body.
        try:
            payload = json.loads(e.read().decode("utf-8"))
        except ValueError:
            raise ServingError(f"HTTP {e.code} from {url}") from e
        if not isinstance(payload, dict):
            raise ServingError(f"HTTP {e.code} from {url}") from e
        return parse_rest_response(payload, fmt)
    except urllib.error.URLError as e:  # refused, unknown host, ...
        raise ServingError(f"cannot reach {url}: {e.reason} (is TF Serving's REST port "
                           "there? --server=host:port)") from e
    except (socket.timeout, TimeoutError) as e:
        raise ServingError(f"no reply from {url} within {timeout:g} s") from e
    except (ConnectionError, OSError) as e:
        raise ServingError(f"cannot reach {url}: {e}") from e
    try:
        payload = json.loads(text)
    except ValueError:
        raise ServingError(f"{url} answered with something that is not JSON: "
                           f"{text[:80]!r}") from None
    if not isinstance(payload, dict):
        raise ServingError(f"{url} answered with JSON that is not an object: {text[:80]!r}")
    return parse_rest_response(payload, fmt)


def _serving_apis():
    try:
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
    except ImportError as e:
        raise ImportError("the gRPC client needs the tensorflow-serving-api package "
                          "(pip install tensorflow-serving-api==<your TensorFlow version>); "
                          "use the REST client otherwise") from e
    return predict_pb2, prediction_service_pb2_grpc


def grpc_predict_request(model_name: str, inputs: Mapping[str, Any],
                         signature_name: str = "serving_default", version: int | None = None):
    """A `tensorflow.serving.PredictRequest` (needs tensorflow-serving-api).

    String inputs become DT_STRING tensors; lists of Python ints become int32 (what the id
    signatures take); numpy arrays keep their dtype.
    """
    import tensorflow as tf

    predict_pb2, _ = _serving_apis()
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    if version:
        request.model_spec.version.value = int(version)
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(_as_array(value)))
    return request


def _as_array(value: Any) -> np.ndarray:
    """Nested lists / arrays -> numpy; strings (str or bytes, mixed) -> an object array of bytes."""
    if isinstance(value, np.ndarray) and value.dtype.kind not in "OU":
        return value
    has_text = False

    def encode(v):
        nonlocal has_text
        if isinstance(v, str):
            has_text = True
            return v.encode("utf-8")
        if isinstance(v, bytes):
            has_text = True
            return v
        if isinstance(v, (list, tuple, np.ndarray)):
            return [encode(x) for x in v]
        return v

    encoded = encode(value.tolist() if isinstance(value, np.ndarray) else value)
    if has_text:
        return np.array(encoded, dtype=object)
    array = np.asarray(encoded)
    # Python ints (e.g. parsed JSON) default to int32: the id signatures take int32, and the
    # server does not convert a gRPC tensor's dtype. Pass a numpy array to choose another.
    return array.astype(np.int32) if array.dtype == np.int64 else array


def grpc_predict(server: str, model_name: str, inputs: Mapping[str, Any],
                 signature_name: str = "serving_default", version: int | None = None,
                 timeout: float = 30.0) -> dict[str, np.ndarray]:
    """Predict over gRPC (port 8500); returns {output name: array}."""
    import grpc
    import tensorflow as tf

    _, prediction_service_pb2_grpc = _serving_apis()
    request = grpc_predict_request(model_name, inputs, signature_name, version)
    with grpc.insecure_channel(server) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            reply = stub.Predict(request, timeout=timeout)
        except grpc.RpcError as e:
            raise ServingError(f"{e.code().name} from {server} (gRPC): {e.details()}") from e
    return {k: tf.make_ndarray(v) for k, v in reply.outputs.items()}


# ---------------------------------------------------------------------------------------------
# Without a server: the SavedModel itself
# ---------------------------------------------------------------------------------------------
def resolve_saved_model_dir(path: str, version: int | None = None) -> str:
    """The SavedModel folder to load: `path` itself when it holds saved_model.pb, else the
    version folder `<path>/<version>` (default: the highest numbered one, as TF Serving's
    default policy serves).

    Raises ServingError naming the folder when there is no SavedModel.
    """
    from bert_tf import io_utils

    if not io_utils.isdir(path):
        raise ServingError(f"--saved_model_dir={path} is not a directory")
    if io_utils.exists(os.path.join(path, "saved_model.pb")):
        if version is not None:
            raise ServingError(f"--version={version}: {path} is a SavedModel itself, not a "
                               "model base path with version folders")
        return path
    versions = sorted(int(n.rstrip("/")) for n in io_utils.listdir(path)
                      if n.rstrip("/").isdigit()
                      and io_utils.exists(os.path.join(path, n.rstrip("/"), "saved_model.pb")))
    if not versions:
        raise ServingError(f"--saved_model_dir={path} holds no saved_model.pb and no version "
                           "folder (1/, 2/, ...) with one")
    if version is None:
        return os.path.join(path, str(versions[-1]))
    if int(version) not in versions:
        raise ServingError(f"--version={version}: {path} has versions "
                           f"{', '.join(map(str, versions))}")
    return os.path.join(path, str(int(version)))


def load_saved_model(path: str):
    """`tf.saved_model.load` with tensorflow-text's ops registered (the raw-text exports use
    `NormalizeUTF8` and the WordPiece/BPE ops): an unregistered op is a ServingError that says
    so."""
    import tensorflow as tf

    try:
        import tensorflow_text  # noqa: F401  (registers the tokenizer ops the exports use)
    except ImportError:
        pass
    try:
        return tf.saved_model.load(path)
    except (tf.errors.NotFoundError, ValueError, KeyError) as e:
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "Op type not registered" in str(e):
            raise ServingError(f"{path}: {message} (install tensorflow-text of your TensorFlow "
                               "version: its ops are needed to run a raw-text export)") from e
        raise ServingError(f"cannot load the SavedModel {path}: {message}") from e


def saved_model_predict(saved_model_dir: str, inputs: Mapping[str, Any],
                        signature_name: str = "serving_default", version: int | None = None,
                        loaded=None) -> dict[str, np.ndarray]:
    """Runs a signature of a SavedModel on a request's inputs, as TF Serving would answer it.

    Args:
      saved_model_dir: a version folder or a model base path (see `resolve_saved_model_dir`).
      inputs: signature input name -> batch of values (the same dict `rest_predict` takes):
        strings (str or bytes) for DT_STRING inputs, nested lists / arrays of numbers (cast to
        the signature's dtype, as the REST API does).
      signature_name: the signature to run.
      version: the version folder under a model base path (default: the highest).
      loaded: an already loaded SavedModel (skips loading; `saved_model_dir` is then only
        named in messages).

    Returns:
      {output name: numpy array, batch first}; strings as an object array of bytes (as
      `parse_rest_response` gives them).

    Raises:
      ServingError: no SavedModel there, an unknown signature, a missing or unexpected input,
        a value the signature cannot take (TF's message kept).
    """
    import tensorflow as tf

    if loaded is None:
        loaded = load_saved_model(resolve_saved_model_dir(saved_model_dir, version))
    if signature_name not in loaded.signatures:
        raise ServingError(f"Serving signature name: \"{signature_name}\" not found in "
                           f"{saved_model_dir} (it has {', '.join(sorted(loaded.signatures))})")
    fn = loaded.signatures[signature_name]
    specs = fn.structured_input_signature[1]
    unknown = sorted(set(inputs) - set(specs))
    missing = sorted(set(specs) - set(inputs))
    if unknown or missing:
        raise ServingError(f"signature {signature_name} takes inputs {sorted(specs)}; "
                           + (f"unexpected {unknown}" if unknown else f"missing {missing}"))
    args = {}
    for name, spec in specs.items():
        value = inputs[name]
        try:
            if spec.dtype == tf.string:
                array = _as_array(value)
                if array.dtype != object:
                    raise ValueError(f"expected strings, got {array.dtype.name}")
                args[name] = tf.constant(array, tf.string)
            else:
                array = np.asarray(value)
                if array.dtype.kind not in "biuf":
                    raise ValueError(f"expected numbers, got {array.dtype}")
                args[name] = tf.constant(array.astype(spec.dtype.as_numpy_dtype))
        except (ValueError, TypeError) as e:
            raise ServingError(f"input {name!r} of {signature_name} ({spec.dtype.name} "
                               f"{spec.shape}): {e}") from None
        if not spec.shape.is_compatible_with(args[name].shape):
            raise ServingError(f"input {name!r} of {signature_name}: shape "
                               f"{args[name].shape.as_list()}, expected {spec.shape}")
    try:
        outputs = fn(**args)
    except (tf.errors.InvalidArgumentError, ValueError, TypeError) as e:
        message = getattr(e, "message", None) or str(e)
        raise ServingError(message.strip().splitlines()[0]) from None
    result = {}
    for key, value in outputs.items():
        array = value.numpy()
        result[key] = array.astype(object) if array.dtype.kind == "S" else array
    return result
