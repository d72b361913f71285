"""`BertConfig`: the model hyper-parameters, read from and written to the original `bert_config.json`."""
from __future__ import annotations

import copy
import dataclasses
import difflib
import warnings
from typing import Any, Mapping

from bert_tf.config_io import JsonConfig
from bert_tf.errors import UserInputError

# Activations a config may name. "gelu" is the original's tanh approximation (google-research/bert
# HEAD); "gelu_exact" is the erf form that the very first release and Hugging Face's "gelu" use.
SUPPORTED_ACTIVATIONS = ("gelu", "gelu_exact", "relu", "tanh", "linear", "swish", "silu")


# Extra keys of Google's published bert_config.json files (the Chinese and multilingual releases):
# kept and written back, never taken for a typo.
PUBLISHED_EXTRA_FIELDS = ("directionality", "pooler_fc_size", "pooler_num_attention_heads",
                          "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type")
# A key whose difflib similarity ratio to a field name (both lower-cased, "-" read as "_") is at
# least this is a near miss of that field: every one-character slip in any field name (a letter
# wrong, missing, doubled or extra: ratio >= 0.9 for the shortest names, 10 characters) and two
# slips in names of 14 characters or more. Keys further away (`position_embedding_type`,
# `vocab_file`, `hidden_dropout`, `layer_norm_eps`, ...: ratios 0.78-0.85 and below) are other
# fields, kept with a warning as the original keeps any key.
NEAR_MISS_RATIO = 0.85


class ConfigError(UserInputError):
    """A `bert_config.json` (or a dict) that does not describe a valid BERT model."""


def nearest_field(key: str, fields: tuple[str, ...]) -> str | None:
    """The field of `fields` that `key` is a near miss of (see `NEAR_MISS_RATIO`), or None.

    `PUBLISHED_EXTRA_FIELDS` and the fields themselves are no near misses. Examples:
    `num_hidden_layer` -> `num_hidden_layers` (ratio 0.97), `hidden_sise` -> `hidden_size`
    (0.91), `Hidden_Size` -> `hidden_size` (1.0 after lower-casing); `pooler_num_attention_heads`
    -> None (published), `hidden_dropout` -> None (0.85 to `hidden_dropout_prob`, just below).
    """
    if key in fields or key in PUBLISHED_EXTRA_FIELDS:
        return None
    normal = str(key).lower().replace("-", "_")
    best, best_ratio = None, 0.0
    for field in fields:
        ratio = difflib.SequenceMatcher(None, normal, field).ratio()
        if ratio > best_ratio:
            best, best_ratio = field, ratio
    return best if best_ratio >= NEAR_MISS_RATIO else None


@dataclasses.dataclass
class BertConfig(JsonConfig):
    """Configuration of a BERT model, field for field the original `bert_config.json`.

    Read with `from_json_file` (errors name the file and the field) or `from_dict`; written with
    `to_json_file` / `to_json_string` (sorted keys, indent 2, as the original).

    Attributes:
      vocab_size: size of the WordPiece vocabulary (rows of the word embedding table).
      hidden_size: width H of every layer.
      num_hidden_layers: number of transformer blocks L.
      num_attention_heads: attention heads A; must divide `hidden_size`, checked when the config
        is made (the original's `BertConfig` accepts any value and fails when the model is
        built; here the error names the bert_config.json before any checkpoint is read;
        `bert_tf.original.modeling.BertConfig` keeps the original's behaviour).
      intermediate_size: width of the feed-forward layer inside each block.
      hidden_act: feed-forward activation, one of `SUPPORTED_ACTIVATIONS`.
      hidden_dropout_prob: dropout on embeddings, attention output and feed-forward output.
      attention_probs_dropout_prob: dropout on the attention probabilities.
      max_position_embeddings: longest sequence the position table covers.
      type_vocab_size: number of segment (token type) ids.
      initializer_range: stddev of the truncated-normal initializer.
      extra_fields: keys of the JSON file that BERT does not use (e.g. the Chinese and
        multilingual releases' `directionality` and `pooler_*`), kept and written back unchanged,
        as the original keeps any extra key. A key that is a near miss of a field
        (`num_hidden_layer`) is an error instead (`from_dict`).
    """

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 16
    initializer_range: float = 0.02
    extra_fields: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    config_error = ConfigError
    config_file_kind = "BERT config file"

    def __post_init__(self) -> None:
        self.validate()

    # ---- validation -------------------------------------------------------------------------
    def validate(self, source: str = "BertConfig") -> None:
        """Raises `ConfigError` naming the first bad field (and `source`, e.g. the file)."""
        if not isinstance(self.extra_fields, dict):
            raise ConfigError(f"{source}: extra_fields must be a dict, got "
                              f"{type(self.extra_fields).__name__}")
        clashing = sorted(set(self.extra_fields) & set(self.model_field_names()))
        if clashing:
            raise ConfigError(f"{source}: extra_fields repeat model field(s) "
                              f"{', '.join(map(repr, clashing))}")
        for field in self._model_fields():
            self.check_field_type(field, source)
            value = getattr(self, field.name)
            if field.type in ("int", int):
                if value <= 0:
                    raise ConfigError(
                        f"{source}: field '{field.name}' must be positive, got {value}")
            elif field.type in ("float", float):
                if field.name.endswith("_prob") and not 0.0 <= value < 1.0:
                    raise ConfigError(
                        f"{source}: field '{field.name}' must be in [0, 1), got {value}")
                if field.name == "initializer_range" and value <= 0:
                    raise ConfigError(
                        f"{source}: field 'initializer_range' must be positive, got {value}")
            elif field.type in ("str", str) and not isinstance(value, str):
                raise ConfigError(f"{source}: field '{field.name}' must be a string, got {value!r}")
        if self.hidden_act not in SUPPORTED_ACTIVATIONS:
            raise ConfigError(
                f"{source}: field 'hidden_act' is {self.hidden_act!r}; expected one of "
                f"{', '.join(SUPPORTED_ACTIVATIONS)}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"{source}: field 'hidden_size' ({self.hidden_size}) is not a multiple of "
                f"'num_attention_heads' ({self.num_attention_heads})")

    @classmethod
    def _model_fields(cls) -> tuple[dataclasses.Field, ...]:
        return tuple(f for f in dataclasses.fields(cls) if f.name != "extra_fields")

    @classmethod
    def model_field_names(cls) -> tuple[str, ...]:
        """The original `BertConfig`'s fields (the keys a bert_config.json is made of)."""
        return tuple(f.name for f in cls._model_fields())

    @property
    def head_size(self) -> int:
        """Width of one attention head, hidden_size / num_attention_heads."""
        return self.hidden_size // self.num_attention_heads

    # ---- (de)serialisation --------------------------------------------------------------------
    @classmethod
    def from_dict(cls, json_object: Mapping[str, Any], source: str = "BertConfig",
                  strict: bool = True) -> "BertConfig":
        """Builds a config from a dict with the original JSON keys.

        A key that is a near miss of a field (`nearest_field`: `num_hidden_layer`,
        `hidden_sise`, `Hidden_Size`, ...) is a `ConfigError` naming the source, the key and the
        field it resembles: the original would keep it as an unused attribute and build that
        field's default (12 layers for `num_hidden_layer`), which then only shows as a
        checkpoint mismatch, or not at all for a field such as `initializer_range`. Other keys
        that are not BERT fields (`directionality` and `pooler_*` of the published Chinese and
        multilingual configs, any other key) are kept in `extra_fields` and written back by
        `to_dict`, as the original accepts any extra key; a warning names them (once per source
        and key set, Python's default warning filter). Missing keys take the original
        `BertConfig` defaults, except `vocab_size` which is required.

        `strict=False` turns the near-miss error into the warning (for configs stored inside
        models that were saved before this check: their weights were built from the defaults).
        """
        known = cls.model_field_names()
        unknown = cls.unknown_fields(json_object, known, source)
        near = {key: nearest_field(key, known) for key in unknown}
        near = {key: field for key, field in near.items() if field is not None}
        if near and strict:
            key, field = next(iter(near.items()))
            default = cls.__dataclass_fields__[field].default
            if field in json_object:
                effect = f"; {field!r} is given too: remove the misspelt key"
            elif default is dataclasses.MISSING:
                effect = ""
            else:
                effect = (f"; as written, the key would be ignored and {field} left at its "
                          f"default {default!r}")
            raise ConfigError(f"{source}: unknown field {key!r} — did you mean {field!r}?"
                              f"{effect}")
        if unknown:
            hints = "".join(f" ({key!r} looks like {field!r})" for key, field in near.items())
            warnings.warn(
                f"{source}: keeping field(s) that BERT does not use: {', '.join(unknown)}{hints} "
                f"(written back unchanged; a bert_config.json's fields are "
                f"{', '.join(sorted(known))})", UserWarning, stacklevel=2)
        if "vocab_size" not in json_object:
            raise ConfigError(f"{source}: required field 'vocab_size' is missing")
        config = cls.__new__(cls)
        for field in cls._model_fields():
            setattr(config, field.name, copy.deepcopy(json_object.get(field.name, field.default)))
        config.extra_fields = {k: copy.deepcopy(json_object[k]) for k in unknown}
        config.validate(source)
        return config

    def to_dict(self) -> dict[str, Any]:
        """The original JSON keys and values, followed by the kept `extra_fields`."""
        out = {name: copy.deepcopy(getattr(self, name)) for name in self.model_field_names()}
        out.update(copy.deepcopy(self.extra_fields))
        return out
