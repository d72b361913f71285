"""Loading a pretrained BERT as users receive one: a model and its tokenizer together.

`from_pretrained(path_or_preset)` recognises, in this order:

  * a bert_tf `.keras` file (`model.save("m.keras")`): the saved model itself;
  * Google's release layout, a folder with `bert_config.json`, `vocab.txt` and `bert_model.ckpt*`
    (any original-format checkpoint: also a converted Hugging Face model or one of bert_tf's);
  * a Hugging Face folder with `config.json`, `model.safetensors` and `vocab.txt`;
  * a bert_tf encoder SavedModel export (`saved_model.pb`, `bert_tf.export.export_encoder_savedmodel`);
  * a preset name (`bert_tf.presets.list_presets()`, the published configs): a randomly
    initialised model of that shape — bert_tf ships no weights, and says so in a warning.

It returns `(model, tokenizer)` (a `PretrainedBert` named tuple), as keras-hub presets give a
model with its preprocessor. The tokenizer is the original's `FullTokenizer`; its vocab is
`vocab_file` when given, else the `vocab.txt` of the folder (or beside the `.keras` file, or in a
SavedModel's `assets/`). A preset has no vocab: pass `vocab_file` (e.g. the release's
`vocab.txt`), or `with_tokenizer=False` for the model alone; anything else is an error, since a
model without the vocab it was built for cannot read text. The vocab's size must equal the
config's `vocab_size`. `do_lower_case` defaults to the casing the name says (`uncased_*`,
`cased_*`, `multi_cased_*`, ...; Hugging Face's `tokenizer_config.json`), else True, as the
original's flag does.

`load_bert(bert_config_file, vocab_file, init_checkpoint)` is the three-file form the task
scripts use.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, NamedTuple

from absl import logging

from bert_tf import io_utils
from bert_tf.errors import UserInputError
from bert_tf.modeling.config import BertConfig, ConfigError

_GOOGLE_CONFIG = "bert_config.json"
_HF_CONFIG = "config.json"
_HF_WEIGHTS = "model.safetensors"
_VOCAB = "vocab.txt"


class PretrainedBert(NamedTuple):
    """What `from_pretrained` returns: `model, tokenizer = bert_tf.from_pretrained(...)`."""

    model: Any
    tokenizer: Any  # FullTokenizer, or None with with_tokenizer=False


def count_vocab_lines(vocab_file: str) -> int:
    """Number of tokens in a vocab file (one per line)."""
    with io_utils.open_file(vocab_file, "rb") as f:
        return sum(1 for _ in f)


def check_vocab_matches_config(vocab_file: str, config: BertConfig, config_file: str = "") -> None:
    """Raises ConfigError (a ValueError) if the vocab's line count is not the config's
    `vocab_size`, or the vocab file does not exist."""
    if not io_utils.exists(vocab_file):
        raise ConfigError(f"vocab file {vocab_file} does not exist")
    n = count_vocab_lines(vocab_file)
    if n != config.vocab_size:
        raise ConfigError(
            f"vocab file {vocab_file} has {n} tokens but vocab_size is {config.vocab_size}"
            f"{' in ' + config_file if config_file else ''}; they must be the same model's files")


def load_tokenizer(vocab_file: str, do_lower_case: bool = True):
    """The original-compatible `FullTokenizer` for a vocab file."""
    from bert_tf.tokenization import FullTokenizer

    return FullTokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)


def _default_factory(config: BertConfig):
    from bert_tf.modeling import BertEncoder

    return BertEncoder(config)


def load_bert(bert_config_file: str, vocab_file: str | None = None,
              init_checkpoint: str | None = None, do_lower_case: bool = True,
              model_factory: Callable[[BertConfig], Any] = _default_factory,
              heads: str = "if_present"):
    """Builds a model from `bert_config.json`, checks the vocab, and loads a checkpoint.

    Args:
      bert_config_file: original-format config.
      vocab_file: WordPiece vocab; its size must equal `vocab_size` (None: no tokenizer).
      init_checkpoint: original-format (TF1-named) checkpoint, or None for fresh weights.
      do_lower_case: for the tokenizer.
      model_factory: called with the config to build the model (`BertEncoder` by default, or
        e.g. `lambda c: BertClassifier(c, num_labels=2)`).
      heads: how head variables are loaded (see `load_original_checkpoint`).

    Returns:
      (config, tokenizer or None, model).
    """
    from bert_tf.checkpoints import load_original_checkpoint

    config = BertConfig.from_json_file(bert_config_file)
    tokenizer = None
    if vocab_file is not None:
        check_vocab_matches_config(vocab_file, config, bert_config_file)
        tokenizer = load_tokenizer(vocab_file, do_lower_case)
    model = model_factory(config)
    model.build_from_config_shapes()
    if init_checkpoint:
        load_original_checkpoint(model, init_checkpoint, heads=heads)
    return config, tokenizer, model


# ---- from_pretrained ----------------------------------------------------------------------------
_exists = io_utils.exists
_isdir = io_utils.isdir


def _has_checkpoint(folder: str) -> bool:
    return bool(io_utils.glob(io_utils.join(folder, "*.index")))


def _looked_for(name: str) -> str:
    from bert_tf.presets import list_presets

    presets = list_presets()
    return (f"{name!r} is not a model bert_tf can load: looked for a .keras file, a folder with "
            f"{_GOOGLE_CONFIG} + bert_model.ckpt* (Google's release), a folder with {_HF_CONFIG} + "
            f"{_HF_WEIGHTS} (Hugging Face), a folder with saved_model.pb (bert_tf encoder export), "
            f"or a preset name ({len(presets)}: {presets[0]} ... {presets[-1]}; "
            "bert_tf.presets.list_presets())")


def _resolve_vocab(explicit: str | None, candidates: list[str], what: str, config: BertConfig,
                   with_tokenizer: bool) -> str | None:
    if not with_tokenizer:
        return None
    if explicit is not None:
        return os.fspath(explicit)
    for candidate in candidates:
        if _exists(candidate):
            return candidate
    raise UserInputError(
        f"{what} has no vocab: looked for {', '.join(candidates) or 'none'}; pass vocab_file= "
        f"(a {config.vocab_size}-line WordPiece vocab.txt of this model), or with_tokenizer=False "
        "for the model alone")


def _hf_lower_case(folder: str) -> bool | None:
    path = os.path.join(folder, "tokenizer_config.json")
    if not _exists(path):
        return None
    try:
        with io_utils.open_file(path) as f:
            value = json.load(f).get("do_lower_case")
    except (json.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, bool) else None


def _load_huggingface_weights(model, folder: str) -> None:
    """Assigns a Hugging Face `model.safetensors` (renamed to the original TF1 names) to the
    model's variables; every encoder variable must be there, head variables when present."""
    import numpy as np

    from bert_tf.checkpoints import CheckpointError, read_huggingface_weights, variable_map

    source = os.path.join(folder, _HF_WEIGHTS)
    weights = read_huggingface_weights(source)
    for name, variable in variable_map(model).items():
        if name not in weights:
            if name.startswith("bert/"):
                raise CheckpointError(f"{source}: no tensor for the encoder variable '{name}'")
            logging.info("%s has no '%s'; it keeps its fresh initialisation", source, name)
            continue
        value = weights[name]
        if tuple(value.shape) != tuple(variable.shape):
            raise CheckpointError(f"{source}: '{name}' has shape {list(value.shape)}, the model "
                                  f"expects {list(variable.shape)}")
        variable.assign(np.asarray(value, dtype=np.float32))


def _encoder_savedmodel_config(export_dir: str) -> BertConfig:
    import tensorflow as tf

    from bert_tf.checkpoints import CheckpointError

    try:
        loaded = tf.saved_model.load(export_dir)
    except (OSError, ValueError, tf.errors.OpError) as e:
        raise CheckpointError(f"cannot load the SavedModel {export_dir}: {e}") from e
    if not hasattr(loaded, "bert_config_json"):
        raise CheckpointError(f"{export_dir} is a SavedModel but not a bert_tf encoder export "
                              "(no bert_config_json); export it with "
                              "bert_tf.export.export_encoder_savedmodel")
    return BertConfig.from_dict(json.loads(loaded.bert_config_json.numpy().decode("utf-8")),
                                source=os.path.join(export_dir, "(bert_config_json)"))


def from_pretrained(path_or_preset: str | os.PathLike,
                    model_factory: Callable[[BertConfig], Any] | None = None, *,
                    vocab_file: str | os.PathLike | None = None,
                    do_lower_case: bool | None = None, with_tokenizer: bool = True,
                    heads: str = "if_present") -> PretrainedBert:
    """A pretrained (or preset) BERT and its tokenizer, from whatever layout it comes in.

    Args:
      path_or_preset: a `.keras` file, a folder in Google's, Hugging Face's or bert_tf's encoder
        SavedModel layout, or a preset name (see the module docstring).
      model_factory: builds the model from the config (default `BertEncoder`; e.g.
        `lambda c: BertClassifier(c, num_labels=2)` for a classifier on the pretrained encoder,
        `BertPretrainer` to keep the masked-LM and next-sentence heads). Not for `.keras` files,
        which hold their own model.
      vocab_file: the WordPiece vocab (default: `vocab.txt` where the model is).
      do_lower_case: tokenizer casing (default: what the name says, else True).
      with_tokenizer: False returns `(model, None)` and needs no vocab.
      heads: how head variables of a checkpoint are loaded (`load_original_checkpoint`).

    Returns:
      `PretrainedBert(model, tokenizer)`; the model is built, its config is `model.config`.

    Raises:
      UserInputError (one line) for a path or preset that is none of the above, a missing
      vocab, a vocab of the wrong size, a checkpoint that does not fit the config.
    """
    from bert_tf import presets

    name = os.fspath(path_or_preset)
    factory = model_factory or _default_factory
    lower_case = presets.lower_case_of_name(name.rstrip("/"))

    if name.endswith(".keras") and _exists(name) and not _isdir(name):
        if model_factory is not None:
            raise UserInputError(f"{name}: a .keras file holds its own model; model_factory is "
                                 "only for checkpoints, Hugging Face folders and presets")
        import keras

        # Imported for registration: the bert_tf classes a .keras file may name.
        import bert_tf.export.encoder  # noqa: F401  (registration)
        import bert_tf.modeling  # noqa: F401  (registration)
        import bert_tf.tasks.feature_based  # noqa: F401  (registration)
        try:
            model = keras.models.load_model(name)
        except (OSError, ValueError) as e:
            raise UserInputError(f"cannot load the Keras model file {name}: {e}") from e
        config = getattr(model, "config", None)
        if not isinstance(config, BertConfig):
            raise UserInputError(f"{name} is a Keras model but not a bert_tf one (no BertConfig)")
        vocab = _resolve_vocab(vocab_file, [os.path.join(os.path.dirname(name) or ".", _VOCAB)],
                               name, config, with_tokenizer)
        source = "bert_tf .keras file"
    elif _isdir(name) and _exists(os.path.join(name, _GOOGLE_CONFIG)) and _has_checkpoint(name):
        config_file = os.path.join(name, _GOOGLE_CONFIG)
        config = BertConfig.from_json_file(config_file)
        vocab = _resolve_vocab(vocab_file, [os.path.join(name, _VOCAB)], name, config,
                               with_tokenizer)
        prefix = os.path.join(name, "bert_model.ckpt")
        checkpoint = prefix if _exists(prefix + ".index") else name
        from bert_tf.checkpoints import load_original_checkpoint

        model = factory(config)
        model.build_from_config_shapes()
        load_original_checkpoint(model, checkpoint, heads=heads)
        source = "Google's release layout"
    elif (_isdir(name) and _exists(os.path.join(name, _HF_CONFIG))
          and _exists(os.path.join(name, _HF_WEIGHTS))):
        from bert_tf.checkpoints import config_from_huggingface

        config_file = os.path.join(name, _HF_CONFIG)
        with io_utils.open_file(config_file) as f:
            try:
                hf_config = json.load(f)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{config_file}: not valid JSON (line {e.lineno}): {e.msg}") from e
        config = config_from_huggingface(hf_config, source=config_file)
        vocab = _resolve_vocab(vocab_file, [os.path.join(name, _VOCAB)], name, config,
                               with_tokenizer)
        hf_case = _hf_lower_case(name)
        lower_case = hf_case if hf_case is not None else lower_case
        model = factory(config)
        model.build_from_config_shapes()
        _load_huggingface_weights(model, name)
        source = "Hugging Face folder"
    elif _isdir(name) and _exists(os.path.join(name, "saved_model.pb")):
        from bert_tf.checkpoints import load_encoder_savedmodel

        config = _encoder_savedmodel_config(name)
        vocab = _resolve_vocab(vocab_file, [os.path.join(name, _VOCAB),
                                            os.path.join(name, "assets", _VOCAB)],
                               name, config, with_tokenizer)
        model = factory(config)
        model.build_from_config_shapes()
        load_encoder_savedmodel(model, name)
        source = "bert_tf encoder SavedModel"
    elif not _exists(name) and presets.is_preset(name):
        config = presets.preset_config(name)
        vocab = vocab_file
        if with_tokenizer and vocab is None:
            raise UserInputError(
                f"preset {name!r} is a configuration only (bert_tf ships no weights and no vocab): "
                f"pass vocab_file= (a {config.vocab_size}-line WordPiece vocab, e.g. the vocab.txt "
                f"of Google's {name} release), or with_tokenizer=False for the model alone")
        model = factory(config)
        model.build_from_config_shapes()
        logging.warning("preset %s: randomly initialised weights; no pretrained weights exist in "
                        "bert_tf (for them, pass the folder of Google's %s release instead)",
                        name, name)
        source = "preset (random initialisation)"
    else:
        raise UserInputError(_looked_for(name))

    tokenizer = None
    if vocab is not None:
        vocab = os.fspath(vocab)
        check_vocab_matches_config(vocab, config, name)
        casing = do_lower_case if do_lower_case is not None else (
            True if lower_case is None else lower_case)
        tokenizer = load_tokenizer(vocab, casing)
    logging.info("Loaded %s from %s (%s)", type(model).__name__, name, source)
    return PretrainedBert(model, tokenizer)
