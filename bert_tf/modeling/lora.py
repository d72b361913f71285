"""LoRA (low-rank adaptation) on any bert_tf model, over Keras 3's own `Dense.enable_lora`.

Keras 3 already gives `Dense` and `EinsumDense` the adapters: `layer.enable_lora(rank,
lora_alpha)` adds `lora_kernel_a` [in, r] (He-uniform) and `lora_kernel_b` [r, out] (zeros),
freezes the kernel, and makes `layer.kernel` the sum `W + (alpha / r) · A @ B`. bert_tf's
attention and feed-forward layers read `layer.kernel` (one fused matmul per block), so the
adapted kernel is what they multiply by: LoRA works through them unchanged. This module adds what
Keras does not: picking the target layers by name, freezing the rest of the model (the task head
stays trainable by default: it is new), a small adapters-only file, and merging the adapters into
the kernels for export (the merged model has no LoRA variables: serving costs nothing extra).
GPT-1's `GptConv1D` (not a Dense) has the same `enable_lora` / `kernel` interface
(`supports_lora`), so GPT-1 models take adapters too (c_attn, c_proj, c_fc).

    n = enable_lora(model, rank=8, alpha=16)          # query/value of every block
    ... fine-tune (only the adapters and the head are trainable) ...
    save_lora_weights(model, "mrpc.lora.npz")        # ~100 KB for BERT-Base r=8 (+ the head)
    load_lora_weights(fresh_model, "mrpc.lora.npz")  # enables LoRA as the file says, then loads
    merge_lora(model)                                # W <- W + (alpha/r) A@B, adapters removed

Dropout on the adapter path (LoRA's `lora_dropout`, `enable_lora(..., dropout=p)`): while
training, an adapted layer of a transformer block computes `x @ W + b + alpha/r · drop(x) @ A @ B`
(the base path sees the undropped input; `adapter_term`, called by the blocks' matmuls), with a
`BertDropout` attached to the layer (`layer.lora_dropout`: its random stream is checkpointed with
the others, and cut batches draw the padded batch's masks). At inference, and with p = 0, the
layers multiply by the adapted kernel in one matmul, as before. Dropout > 0 is refused for layers
that Keras calls itself (the pooler, a head) and for GPT-1's conv1d layers: their call has no
adapter path.

A fine-tuning run's checkpoint names the adapters after the kernel's original name
(`bert/encoder/layer_0/attention/self/query/lora_a`, `.../lora_b`, and the scalar
`.../lora_alpha`): `checkpoint_names`, `base_kernels`.
"""
from __future__ import annotations

import contextlib
import fnmatch
import io
import json

import keras
import numpy as np

from bert_tf import io_utils
from bert_tf.errors import UserInputError
from bert_tf.modeling.dropout import BertDropout

DEFAULT_TARGETS = ("query", "value")
"""The layers adapted by default: the attention's query and value projections (the LoRA paper's
choice). Other bert_tf Dense names: key, attention_output_dense, intermediate_dense,
output_dense, pooler."""

DROPOUT_LAYERS = ("query", "key", "value", "attention_output_dense", "intermediate_dense",
                  "output_dense")
"""The layers whose adapter path can take dropout: the transformer blocks' matmuls, which call
`adapter_term` (other Dense layers are called by Keras, which has no adapter path)."""

FORMAT = "bert_tf.lora/1"
_META_KEY = "__meta__"


class LoraError(UserInputError):
    """A bad LoRA setting or file: one line naming what was wrong."""


def _adaptable(layer) -> bool:
    return (type(layer) in (keras.layers.Dense, keras.layers.EinsumDense)
            or getattr(type(layer), "supports_lora", False))


def _ensure_built(model) -> None:
    if not model.built and hasattr(model, "build_from_config_shapes"):
        model.build_from_config_shapes()
    if not model.built:
        raise LoraError(f"{type(model).__name__} is not built; call it once on a batch first")


def _all_layers(model):
    return model._flatten_layers(include_self=False, recursive=True)


def _matches(layer, targets) -> bool:
    return any(layer.name == t or fnmatch.fnmatchcase(layer.path, t) for t in targets)


def _head_variables(model) -> list:
    """The weights of `model` outside its `.encoder` (BERT) or `.transformer` (GPT-1): a task
    model's head; [] for an encoder."""
    encoder = getattr(model, "encoder", None) or getattr(model, "transformer", None)
    if encoder is None:
        return []
    taken = {id(v) for v in encoder.weights}
    return [v for v in model.weights if id(v) not in taken]


def adaptable_layers(model) -> list:
    """The layers of `model` LoRA can adapt (Dense, EinsumDense, GPT-1's conv1d), in Keras'
    layer order."""
    return [layer for layer in _all_layers(model) if _adaptable(layer)]


def target_layers(model, targets) -> list:
    """The adaptable layers of `model` that `targets` (names or Keras-path patterns, as
    `enable_lora` takes them; a string is split at commas) select, in Keras' layer order."""
    if isinstance(targets, str):
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    return [layer for layer in adaptable_layers(model) if _matches(layer, tuple(targets))]


def base_kernel(layer):
    """The base kernel variable W of an adaptable layer (with or without LoRA)."""
    return layer._kernel


def add_adapter_dropout(layer, rate: float, seed: int = 0) -> None:
    """Attaches adapter dropout (`layer.lora_dropout`, a `BertDropout`) to a LoRA layer of a
    transformer block (`DROPOUT_LAYERS`).

    Raises:
      LoraError: rate outside [0, 1), or a layer whose call has no adapter path.
    """
    if not 0 <= rate < 1:
        raise LoraError(f"LoRA dropout must be in [0, 1), got {rate!r}")
    if layer.name not in DROPOUT_LAYERS:
        raise LoraError(f"LoRA dropout {rate!r} on {layer.path}: adapter dropout applies to the "
                        f"transformer blocks' layers ({', '.join(DROPOUT_LAYERS)}) only; use "
                        "dropout 0 or other targets")
    tracker = getattr(layer, "_tracker", None)
    if tracker is not None:
        tracker.unlock()
    layer.lora_dropout = BertDropout(float(rate), seed=seed, name=f"{layer.name}_lora_dropout")
    if tracker is not None:
        tracker.lock()


def lora_layers(model) -> dict[str, keras.layers.Layer]:
    """Keras path -> layer, for every layer of `model` with LoRA enabled."""
    return {layer.path: layer for layer in _all_layers(model)
            if _adaptable(layer) and getattr(layer, "lora_enabled", False)}


def enable_lora(model, rank: int = 8, alpha: float | None = None,
                targets=DEFAULT_TARGETS, dropout: float = 0.0, train_head: bool = True,
                seed: int = 0) -> list[str]:
    """Adds rank-`rank` adapters to the target layers of `model` and freezes everything else.

    Args:
      model: any built bert_tf model (BertEncoder, BertClassifier, ...; or a Keras model holding
        Dense / EinsumDense layers).
      rank: r >= 1, the adapters' inner size.
      alpha: the update's scale is alpha / r (default: alpha = r, scale 1).
      targets: layer names ("query", "value", "intermediate_dense", ...) or fnmatch patterns on
        Keras paths ("*/layer_11/*/value"); a string is split at commas. Each must match at
        least one Dense / EinsumDense layer.
      dropout: 0 <= p < 1, dropout on the adapter path's input while training (the module
        docstring); p > 0 only for the transformer blocks' layers (`DROPOUT_LAYERS`).
      train_head: keep the task head (every weight outside `model.encoder`) trainable.
      seed: seeds the A matrices' He-uniform initialisation (B starts at zero, so the adapted
        model starts equal to the base model).

    Returns:
      the Keras paths of the adapted layers.

    Raises:
      LoraError (one line): rank < 1, alpha <= 0, dropout outside [0, 1), a target matching
      no Dense / EinsumDense layer, a layer that already has LoRA, dropout > 0 on a layer
      outside the transformer blocks.
    """
    if isinstance(targets, str):
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    targets = tuple(targets)
    if not isinstance(rank, (int, np.integer)) or rank < 1:
        raise LoraError(f"LoRA rank must be an integer >= 1, got {rank!r}")
    if alpha is not None and not alpha > 0:
        raise LoraError(f"LoRA alpha must be > 0, got {alpha!r}")
    if not 0 <= dropout < 1:
        raise LoraError(f"LoRA dropout must be in [0, 1), got {dropout!r}")
    if not targets:
        raise LoraError("LoRA targets are empty; give layer names such as query,value")
    _ensure_built(model)
    layers = adaptable_layers(model)
    for t in targets:
        if not any(_matches(layer, (t,)) for layer in layers):
            names = sorted({layer.name for layer in layers})
            raise LoraError(f"LoRA target {t!r} matches no Dense/EinsumDense layer of "
                            f"{type(model).__name__}; its Dense layer names: "
                            f"{', '.join(names) or '(none)'}")
    chosen = target_layers(model, targets)
    for layer in chosen:
        if layer.lora_enabled:
            raise LoraError(f"LoRA is already enabled on {layer.path}")
        if dropout and layer.name not in DROPOUT_LAYERS:
            raise LoraError(f"LoRA dropout {dropout!r} on {layer.path}: adapter dropout applies "
                            f"to the transformer blocks' layers ({', '.join(DROPOUT_LAYERS)}) "
                            "only; use dropout 0 or other targets")
    for i, layer in enumerate(chosen):
        layer.enable_lora(int(rank), lora_alpha=alpha if alpha is not None else int(rank),
                          a_initializer=keras.initializers.HeUniform(seed=seed + i))
        if dropout:
            add_adapter_dropout(layer, dropout, seed=seed + i)
    adapters = {id(v) for layer in lora_layers(model).values()
                for v in (layer.lora_kernel_a, layer.lora_kernel_b)}
    head = {id(v) for v in _head_variables(model)} if train_head else set()
    for v in model.weights:
        if id(v) not in adapters and id(v) not in head:
            v.trainable = False
    return [layer.path for layer in chosen]


def _adapter_arrays(model) -> tuple[dict[str, np.ndarray], dict]:
    arrays, layers_meta = {}, {}
    for path, layer in lora_layers(model).items():
        arrays[f"lora/{path}/a"] = np.asarray(layer.lora_kernel_a)
        arrays[f"lora/{path}/b"] = np.asarray(layer.lora_kernel_b)
        layers_meta[path] = {"rank": int(layer.lora_rank), "alpha": float(layer.lora_alpha)}
    return arrays, layers_meta


def save_lora_weights(model, path: str) -> str:
    """Writes the adapters (and the trainable head weights) of `model` to one `.npz` file.

    The file holds `lora/<layer path>/a|b` arrays, `head/<variable path>` arrays (the trainable
    weights outside `model.encoder`, e.g. a classifier's output layer) and a JSON `__meta__`
    (format, each layer's rank and alpha). Written atomically; an existing file is replaced
    only if it is a LoRA file of this format (never another kind of file).

    Raises:
      LoraError: `model` has no LoRA layers; `path` exists and is not a LoRA file.
    """
    arrays, layers_meta = _adapter_arrays(model)
    if not arrays:
        raise LoraError(f"{type(model).__name__} has no LoRA layers; call enable_lora first")
    if io_utils.exists(path):
        try:
            read_lora_file(path)
        except LoraError:
            raise LoraError(f"{path} exists and is not a LoRA weights file; not overwriting "
                            "it") from None
    head = [v for v in _head_variables(model) if v.trainable]
    arrays.update({f"head/{v.path}": np.asarray(v) for v in head})
    meta = {"format": FORMAT, "layers": layers_meta, "head": [v.path for v in head]}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays, **{_META_KEY: np.array(json.dumps(meta))})
    io_utils.atomic_write_bytes(path, buffer.getvalue())
    return path


def read_lora_file(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """(meta, arrays) of a file written by `save_lora_weights`; LoraError if it is not one."""
    try:
        with np.load(io.BytesIO(io_utils.read_bytes(path)), allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(str(arrays.pop(_META_KEY)))
    except (OSError, ValueError, KeyError) as e:
        raise LoraError(f"{path}: not a LoRA weights file of save_lora_weights "
                        f"({type(e).__name__})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise LoraError(f"{path}: format {meta.get('format') if isinstance(meta, dict) else '?'}"
                        f", expected {FORMAT}")
    return meta, arrays


def load_lora_weights(model, path: str) -> list[str]:
    """Loads a `save_lora_weights` file into `model` (the same architecture, base weights
    loaded). A model without LoRA gets it enabled on the file's layers (rank and alpha from the
    file); a model with LoRA must have exactly the file's layers.

    Returns: the adapted layers' paths.

    Raises:
      LoraError naming the file and the layer or variable that does not fit.
    """
    meta, arrays = read_lora_file(path)
    _ensure_built(model)
    present = lora_layers(model)
    wanted = meta["layers"]
    if not present:
        layers = {layer.path: layer for layer in _all_layers(model) if _adaptable(layer)}
        missing = sorted(set(wanted) - set(layers))
        if missing:
            raise LoraError(f"{path}: layer {missing[0]} is not a Dense layer of "
                            f"{type(model).__name__}")
        head = bool(meta.get("head"))
        for p, m in wanted.items():  # per layer: rank and alpha may differ
            enable_lora(model, rank=m["rank"], alpha=m["alpha"], targets=(p,), train_head=head)
        present = lora_layers(model)
    elif set(present) != set(wanted):
        diff = sorted(set(present) ^ set(wanted))
        raise LoraError(f"{path}: its LoRA layers differ from the model's (e.g. {diff[0]})")
    for p, layer in present.items():
        for name, var in (("a", layer.lora_kernel_a), ("b", layer.lora_kernel_b)):
            value = arrays.get(f"lora/{p}/{name}")
            if value is None or tuple(value.shape) != tuple(var.shape):
                raise LoraError(f"{path}: lora/{p}/{name} has shape "
                                f"{None if value is None else tuple(value.shape)}, the model's "
                                f"is {tuple(var.shape)}")
            var.assign(value)
        if float(layer.lora_alpha) != float(wanted[p]["alpha"]):
            raise LoraError(f"{path}: {p} has alpha {wanted[p]['alpha']}, the model's is "
                            f"{layer.lora_alpha}")
    by_path = {v.path: v for v in model.weights}
    for vpath in meta.get("head", []):
        var = by_path.get(vpath)
        value = arrays[f"head/{vpath}"]
        if var is None or tuple(var.shape) != tuple(value.shape):
            raise LoraError(f"{path}: head variable {vpath} {tuple(value.shape)} does not fit "
                            f"{type(model).__name__}")
        var.assign(value)
    return sorted(present)


def merge_lora(model) -> list[str]:
    """Folds every adapter into its kernel (W <- W + alpha/r · A @ B) and removes the adapters,
    in place: the model then has the base architecture's variables only (exports, checkpoints
    and `.keras` files see a plain model) and computes what the adapted model computed (up to
    float rounding of the sum). Every weight becomes trainable again.

    Returns: the merged layers' paths ([] when the model has no LoRA).
    """
    merged = []
    for p, layer in lora_layers(model).items():
        kernel = layer.kernel  # W + (alpha / r) A @ B, in the compute dtype
        layer.lora_enabled = False
        layer._kernel.assign(keras.ops.cast(kernel, layer._kernel.dtype))
        layer._tracker.unlock()
        del layer.lora_kernel_a
        del layer.lora_kernel_b
        if getattr(layer, "lora_dropout", None) is not None:
            del layer.lora_dropout
        layer._tracker.lock()
        layer.lora_rank = None
        layer.lora_alpha = None
        merged.append(p)
    for v in model.weights:
        if v.dtype in ("float16", "bfloat16", "float32", "float64"):
            v.trainable = True
    return merged


def lora_parameter_count(model) -> int:
    """The number of adapter parameters (sum of A and B sizes) in `model`."""
    return sum(int(np.prod(layer.lora_kernel_a.shape)) + int(np.prod(layer.lora_kernel_b.shape))
               for layer in lora_layers(model).values())


def _scale(layer) -> float:
    return float(layer.lora_alpha) / float(layer.lora_rank)


def has_adapter_path(layer, training) -> bool:
    """Whether `layer` runs its adapters apart from its base kernel in this call: LoRA with
    dropout, while training (a Python bool: decided at trace time)."""
    return (bool(training) and getattr(layer, "lora_enabled", False)
            and getattr(layer, "lora_dropout", None) is not None)


def layer_kernel(layer, training=None):
    """The kernel a block multiplies by: the layer's `.kernel` (with LoRA, the adapted sum
    W + alpha/r · A @ B), or its base kernel W when `has_adapter_path` (then add
    `adapter_term`). Without LoRA this is `layer.kernel`, the original graph."""
    return layer._kernel if has_adapter_path(layer, training) else layer.kernel


def adapter_term(x, layer, training=None):
    """alpha/r · dropout(x) @ A @ B for x [rows, in] -> [rows, out] in x's dtype, when
    `has_adapter_path(layer, training)`; else None (the adapters are in `layer_kernel`)."""
    if not has_adapter_path(layer, training):
        return None
    dropped = layer.lora_dropout(x, training=True)
    a = keras.ops.cast(layer.lora_kernel_a, x.dtype)
    b = keras.ops.cast(layer.lora_kernel_b, x.dtype)
    return keras.ops.matmul(keras.ops.matmul(dropped, a), b) * keras.ops.cast(_scale(layer),
                                                                              x.dtype)


@contextlib.contextmanager
def base_kernels(model):
    """Within the block, every LoRA layer of `model` reads `.kernel` as its base variable W (not
    the adapted sum), so code that maps kernels to checkpoint names sees variables. Python
    state only: do not trace or call the model inside."""
    layers = list(lora_layers(model).values())
    for layer in layers:
        layer.lora_enabled = False
    try:
        yield layers
    finally:
        for layer in layers:
            layer.lora_enabled = True


def checkpoint_names(model, names: dict) -> dict:
    """The adapters' checkpoint entries, named after their kernels' names in `names`.

    Args:
      model: a model with LoRA layers.
      names: checkpoint name -> variable of `model`'s weights, made under `base_kernels` (so
        each LoRA layer's base kernel is there as a variable, e.g. under
        `bert/encoder/layer_0/attention/self/query/kernel`).

    Returns:
      {"<prefix>/lora_a": A variable, "<prefix>/lora_b": B variable, "<prefix>/lora_alpha":
       float32 numpy scalar} per LoRA layer, where <prefix> is the kernel's name without its
      last component.

    Raises:
      LoraError: a LoRA layer whose kernel has no name in `names`.
    """
    by_id = {id(v): n for n, v in names.items()}
    out = {}
    for path, layer in lora_layers(model).items():
        name = by_id.get(id(layer._kernel))
        if name is None:
            raise LoraError(f"the LoRA layer {path} has no kernel among the checkpoint names")
        prefix = name.rsplit("/", 1)[0]
        out[f"{prefix}/lora_a"] = layer.lora_kernel_a
        out[f"{prefix}/lora_b"] = layer.lora_kernel_b
        out[f"{prefix}/lora_alpha"] = np.float32(layer.lora_alpha)
    return out

