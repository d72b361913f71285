"""The original GPT-1 parameter files (`model/params_shapes.json` + `params_0..9.npy`), both ways.

Layout (openai/finetune-transformer-lm): `params_shapes.json` is a JSON list of array shapes —
the **position** table first, then the token table, then 12 arrays per layer
(`attn/c_attn/{w,b}`, `attn/c_proj/{w,b}`, `ln_1/{g,b}`, `mlp/c_fc/{w,b}`, `mlp/c_proj/{w,b}`,
`ln_2/{g,b}`). The ten `.npy` files hold the flat C-order concatenation of all arrays, split into
10 chunks whose boundaries need not fall on array boundaries. There are no special-token rows and
no classifier arrays in the files.

Loading follows train.py's inline code statement by statement: concatenate the ten files, split
by the cumulative sizes, reshape; keep the first `n_ctx` position rows; build
`we = [tokens; specials; positions]` with the special rows drawn as
`np.random.randn(n_special, n_embd) * 0.02` (train.py's global RNG, seeded by `--seed`, default
42; here a `RandomState(seed)`, which gives the same numbers); drop the position entry; assign the
first `1 + 12·n_transfer` arrays (0 for n_transfer = -1) to the model's variables in the
original's order.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Sequence

import numpy as np

from bert_tf.errors import UserInputError
from bert_tf.gpt.config import GptConfig
from bert_tf import io_utils
from bert_tf.io_utils import atomic_output_path

N_PARAM_FILES = 10
SHAPES_FILE = "params_shapes.json"
ARRAYS_PER_LAYER = 12  # hard-coded in train.py's n_transfer arithmetic
TRAIN_PY_SEED = 42  # train.py's --seed default
TRAIN_PY_N_TRANSFER = 12  # train.py's --n_transfer default
SPECIAL_ROWS_FILE = "special_rows.npy"
"""The special-token rows of `we` (float32 [n_special, n_embd]) beside the params files. The
original layout holds none (train.py draws them at load time); bert_tf writes them
(`write_original_outputs`) so that a trained model is rebuilt exactly (`load_special_rows`)."""
CONFIG_FILE = "config.json"


class OriginalParamsError(UserInputError):
    """A params folder that is missing files or does not fit the layout or the model."""


def _param_file(folder: str | os.PathLike, index: int) -> str:
    return os.path.join(os.fspath(folder), f"params_{index}.npy")


def read_original_param_files(folder: str | os.PathLike) -> list[np.ndarray]:
    """Reads the on-disk arrays exactly as stored (position table first, all its rows).

    Returns float32 arrays shaped as `params_shapes.json` lists them. Raises
    `OriginalParamsError` naming the file for a missing/unreadable file, a shape list that is not
    a list of lists of positive integers, or files whose total size differs from the shapes'.
    """
    shapes_path = os.path.join(os.fspath(folder), SHAPES_FILE)
    try:
        with open(shapes_path, encoding="utf-8") as f:
            shapes = json.load(f)
    except FileNotFoundError:
        raise OriginalParamsError(f"{shapes_path}: missing (an original GPT params folder has "
                                  f"{SHAPES_FILE} and params_0..{N_PARAM_FILES - 1}.npy)") from None
    except OSError as e:
        raise OriginalParamsError(f"{shapes_path}: cannot read: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise OriginalParamsError(f"{shapes_path}: not valid JSON (line {e.lineno}, column "
                                  f"{e.colno}): {e.msg}") from e
    if not isinstance(shapes, list) or not shapes:
        raise OriginalParamsError(f"{shapes_path}: expected a non-empty JSON list of shapes, got "
                                  f"{type(shapes).__name__}")
    for i, shape in enumerate(shapes):
        if (not isinstance(shape, list) or not shape
                or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in shape)):
            raise OriginalParamsError(f"{shapes_path}: entry {i} is {shape!r}; expected a list of "
                                      "positive integers such as [40478, 768]")
    chunks = []
    for n in range(N_PARAM_FILES):
        path = _param_file(folder, n)
        try:
            chunk = np.load(path)
        except FileNotFoundError:
            raise OriginalParamsError(f"{path}: missing (the original loader reads "
                                      f"params_0..{N_PARAM_FILES - 1}.npy)") from None
        except (OSError, ValueError) as e:
            raise OriginalParamsError(f"{path}: not a readable .npy array: {e}") from e
        if chunk.ndim != 1:
            raise OriginalParamsError(f"{path}: expected a 1-D array, got shape {chunk.shape}")
        chunks.append(chunk)
    flat = np.concatenate(chunks, 0)
    offsets = np.cumsum([np.prod(shape) for shape in shapes])
    if flat.size != offsets[-1]:
        raise OriginalParamsError(
            f"{shapes_path}: the shapes add up to {int(offsets[-1])} values but "
            f"params_0..{N_PARAM_FILES - 1}.npy hold {flat.size}")
    # train.py: np.split(np.concatenate(init_params, 0), offsets)[:-1], then reshape.
    arrays = np.split(flat, offsets)[:-1]
    return [a.reshape(shape) for a, shape in zip(arrays, shapes)]


def original_arrays_to_variables(arrays: Sequence[np.ndarray], config: GptConfig,
                                 seed: int = TRAIN_PY_SEED,
                                 source: str = "params") -> list[np.ndarray]:
    """train.py's transformation of the on-disk arrays into variable values.

    Args:
      arrays: from `read_original_param_files` (positions, tokens, 12 per layer).
      config: the model's config (n_vocab, n_special, n_ctx, n_embd).
      seed: seed of the RandomState that draws the special rows (train.py's `--seed`).
      source: named in errors (the folder).

    Returns [we [table_rows, n_embd], then the layer arrays] (float32), in variable order.
    """
    if len(arrays) < 2:
        raise OriginalParamsError(f"{source}: {len(arrays)} arrays; expected the position and "
                                  "token tables first")
    positions, tokens = arrays[0], arrays[1]
    if (positions.ndim != 2 or positions.shape[1] != config.n_embd
            or positions.shape[0] < config.n_ctx):
        raise OriginalParamsError(
            f"{source}: the position table (entry 0 of {SHAPES_FILE}) is {list(positions.shape)}; "
            f"the config needs at least [{config.n_ctx}, {config.n_embd}] (n_ctx, n_embd)")
    if tokens.shape != (config.n_vocab, config.n_embd):
        raise OriginalParamsError(
            f"{source}: the token table (entry 1 of {SHAPES_FILE}) is {list(tokens.shape)}; the "
            f"config expects [{config.n_vocab}, {config.n_embd}] (n_vocab, n_embd)")
    specials = (np.random.RandomState(seed).randn(config.n_special, config.n_embd)
                * 0.02).astype(np.float32)
    we = np.concatenate([tokens, specials, positions[:config.n_ctx]], 0)
    return [we, *arrays[2:]]


def load_original_params(model, folder: str | os.PathLike, n_transfer: int = TRAIN_PY_N_TRANSFER,
                         seed: int = TRAIN_PY_SEED) -> list[str]:
    """Loads an original params folder into a `GptModel`, as train.py does.

    Args:
      model: a `GptModel`.
      folder: holds `params_shapes.json` and `params_0..9.npy`.
      n_transfer: layers to transfer (train.py's `--n_transfer`, default 12; -1 = none, so not
        even `we`); the first `1 + 12·n_transfer` arrays are assigned, as many as exist.
      seed: draws the special-token rows (train.py's `--seed`, default 42).

    Returns the original names of the assigned variables. Every shape is checked before anything
    is assigned, so a mismatch leaves the model untouched.
    """
    source = os.fspath(folder)
    values = original_arrays_to_variables(read_original_param_files(folder), model.config,
                                          seed=seed, source=source)
    count = 0 if n_transfer == -1 else 1 + ARRAYS_PER_LAYER * n_transfer
    file_layers = (len(values) - 1) // ARRAYS_PER_LAYER
    if n_transfer > model.config.n_layer and file_layers > model.config.n_layer:
        # train.py would go on assigning layer arrays to the next variables (and fail on
        # clf/w); say what to do instead.
        raise OriginalParamsError(
            f"{source}: the files hold {file_layers} layers but the model has "
            f"{model.config.n_layer}; pass n_transfer={model.config.n_layer} (train.py's "
            "--n_transfer) to transfer only the first ones")
    pairs = list(zip(model.original_variables()[:count], values[:count]))
    for index, ((name, variable), value) in enumerate(pairs):
        if tuple(variable.shape) != value.shape:
            entry = "we" if index == 0 else f"entry {index + 1} of {SHAPES_FILE}"
            raise OriginalParamsError(f"{source}: {entry} has shape {list(value.shape)} but the "
                                      f"model's {name} is {list(variable.shape)}")
    for (name, variable), value in pairs:
        variable.assign(value)
    return [name for (name, _), _ in pairs]


def model_to_original_arrays(model) -> list[np.ndarray]:
    """The on-disk arrays of a `GptModel`: [positions [n_ctx, n_embd], tokens [n_vocab, n_embd],
    12 per layer]. The special rows and the classifier are not part of the format (train.py
    draws / initialises them), so they are left out."""
    c = model.config
    named = model.original_variables()
    we = np.asarray(named[0][1].numpy(), np.float32)
    layers = [np.asarray(v.numpy(), np.float32) for name, v in named[1:]
              if not name.startswith("model/clf/")]
    return [we[c.first_position_id:], we[:c.n_vocab], *layers]


def write_original_param_files(folder: str | os.PathLike, arrays: Sequence[np.ndarray],
                               n_files: int = N_PARAM_FILES, overwrite: bool = False) -> None:
    """Writes `params_shapes.json` and `params_0..{n_files-1}.npy` in the original layout.

    The flat concatenation is split with `np.array_split` (the first chunks one value longer),
    which reproduces the fixture's split points; the original loader accepts any split. Each file
    is written atomically; existing files are refused unless `overwrite`.
    """
    folder = os.fspath(folder)
    targets = [os.path.join(folder, SHAPES_FILE)] + [_param_file(folder, n) for n in range(n_files)]
    existing = [t for t in targets if os.path.exists(t)]
    if existing and not overwrite:
        raise OriginalParamsError(f"{existing[0]}: exists; refusing to overwrite original params "
                                  "(pass overwrite=True)")
    os.makedirs(folder, exist_ok=True)
    arrays = [np.asarray(a, np.float32) for a in arrays]
    flat = np.concatenate([a.reshape(-1) for a in arrays], 0)
    for n, chunk in enumerate(np.array_split(flat, n_files)):
        with atomic_output_path(_param_file(folder, n)) as tmp:
            with open(tmp, "wb") as f:
                np.save(f, chunk)
    with atomic_output_path(targets[0]) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump([list(a.shape) for a in arrays], f)


def save_original_params(model, folder: str | os.PathLike, overwrite: bool = False) -> None:
    """Writes a `GptModel` as an original params folder that train.py (and
    `load_original_params`) can load (position table of n_ctx rows)."""
    write_original_param_files(folder, model_to_original_arrays(model), overwrite=overwrite)


def original_params_to_keras(params_folder: str | os.PathLike, config: GptConfig,
                             output_path: str | os.PathLike, n_transfer: int = TRAIN_PY_N_TRANSFER,
                             seed: int = TRAIN_PY_SEED, clf_token: int | None = None) -> None:
    """Original params folder -> a `.keras` file of a `GptModel` (the classifier keeps its
    initialisation, as in train.py). Refuses to overwrite `output_path`."""
    from bert_tf.gpt.model import GptModel
    output_path = os.fspath(output_path)
    if os.path.exists(output_path):
        raise OriginalParamsError(f"{output_path}: exists; refusing to overwrite")
    model = GptModel(config, clf_token=clf_token)
    load_original_params(model, params_folder, n_transfer=n_transfer, seed=seed)
    parent = os.path.dirname(os.path.abspath(output_path))
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix=".gpt_convert_") as tmp_dir:
        tmp = os.path.join(tmp_dir, "model.keras")  # Keras needs the .keras suffix
        model.save(tmp)
        os.replace(tmp, output_path)


def keras_to_original_params(model_path: str | os.PathLike, params_folder: str | os.PathLike,
                             overwrite: bool = False) -> None:
    """A `.keras` file of a `GptModel` (or a `GptClassifier`: its transformer) -> original
    params folder."""
    import keras

    # Keras 3 does not import a saved class's module: register the GPT classes first.
    import bert_tf.gpt.model  # noqa: F401
    import bert_tf.gpt.task_model  # noqa: F401
    path = os.fspath(model_path)
    if not os.path.exists(path):
        raise OriginalParamsError(f"{path}: no such .keras file")
    model = keras.models.load_model(path)
    model = getattr(model, "transformer", model)
    if not hasattr(model, "original_variables"):
        raise OriginalParamsError(f"{path}: holds a {type(model).__name__}, not a GPT model")
    save_original_params(model, params_folder, overwrite=overwrite)


def write_original_outputs(model, folder: str | os.PathLike, overwrite: bool = True) -> str:
    """Writes a `GptModel` as an original params folder plus `special_rows.npy` (its trained
    special-token rows) and `config.json` (its `GptConfig`): what `GptCausalLM.from_pretrained`
    and the exporter read to rebuild this exact model (without them they would take the preset's
    sizes and redraw the special rows). Returns the folder."""
    folder = os.fspath(folder)
    save_original_params(model, folder, overwrite=overwrite)
    c = model.config
    rows = np.asarray(model.embedding.we.numpy()[c.n_vocab:c.first_position_id], np.float32)
    with atomic_output_path(os.path.join(folder, SPECIAL_ROWS_FILE)) as tmp:
        with io_utils.open_file(tmp, "wb") as f:
            np.save(f, rows)
    c.to_json_file(os.path.join(folder, CONFIG_FILE))
    return folder


def load_special_rows(model, folder: str | os.PathLike) -> str | None:
    """Assigns the special-token rows of `model.embedding.we` ([n_special, n_embd]) from
    `folder/special_rows.npy` when the file exists. Returns the file's path, or None when there
    is none (the rows then stay as `load_original_params` drew them). A file that is not a
    readable array of that shape -> OriginalParamsError naming it."""
    path = os.path.join(os.fspath(folder), SPECIAL_ROWS_FILE)
    if not io_utils.exists(path):
        return None
    c = model.config
    with io_utils.open_file(path, "rb") as f:
        try:
            rows = np.load(f)
        except (OSError, ValueError) as e:
            raise OriginalParamsError(f"{path}: not a readable .npy array ({e})") from None
    if rows.shape != (c.n_special, c.n_embd):
        raise OriginalParamsError(f"{path}: shape {list(rows.shape)}; expected "
                                  f"[{c.n_special}, {c.n_embd}] (n_special, n_embd)")
    we = model.embedding.we
    table = np.array(we.numpy())
    table[c.n_vocab:c.first_position_id] = rows
    we.assign(table)
    return path
