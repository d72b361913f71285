"""`BertConfig`: the model hyper-parameters, read from and written to the original `bert_config.json`."""
from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any, Mapping

from bert_tf.config_io import JsonConfig
from bert_tf.errors import UserInputError

# Activations a config may name. "gelu" is the original's tanh approximation (google-research/bert
# HEAD); "gelu_exact" is the erf form that the very first release and Hugging Face's "gelu" use.
SUPPORTED_ACTIVATIONS = ("gelu", "gelu_exact", "relu", "tanh", "linear", "swish", "silu")


class ConfigError(UserInputError):
    """A `bert_config.json` (or a dict) that does not describe a valid BERT model."""


@dataclasses.dataclass
class BertConfig(JsonConfig):
    """Configuration of a BERT model, field for field the original `bert_config.json`.

    Read with `from_json_file` (errors name the file and the field) or `from_dict`; written with
    `to_json_file` / `to_json_string` (sorted keys, indent 2, as the original).

    Attributes:
      vocab_size: size of the WordPiece vocabulary (rows of the word embedding table).
      hidden_size: width H of every layer.
      num_hidden_layers: number of transformer blocks L.
      num_attention_heads: attention heads A; must divide `hidden_size`.
      intermediate_size: width of the feed-forward layer inside each block.
      hidden_act: feed-forward activation, one of `SUPPORTED_ACTIVATIONS`.
      hidden_dropout_prob: dropout on embeddings, attention output and feed-forward output.
      attention_probs_dropout_prob: dropout on the attention probabilities.
      max_position_embeddings: longest sequence the position table covers.
      type_vocab_size: number of segment (token type) ids.
      initializer_range: stddev of the truncated-normal initializer.
      extra_fields: keys of the JSON file that BERT does not use (e.g. the Chinese and
        multilingual releases' `directionality` and `pooler_*`), kept and written back unchanged,
        as the original keeps any extra key.
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
    def from_dict(cls, json_object: Mapping[str, Any], source: str = "BertConfig") -> "BertConfig":
        """Builds a config from a dict with the original JSON keys.

        Keys that are not BERT fields (e.g. `directionality` and `pooler_*` in the published
        Chinese and multilingual configs) are kept in `extra_fields` and written back by
        `to_dict`, as the original accepts any extra key; a warning names them (once per source
        and key set, Python's default warning filter), since they can also be typos. Missing keys
        take the original `BertConfig` defaults, except `vocab_size` which is required.
        """
        known = cls.model_field_names()
        unknown = cls.unknown_fields(json_object, known, source)
        if unknown:
            warnings.warn(
                f"{source}: keeping field(s) that BERT does not use: {', '.join(unknown)} "
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
