"""`GptConfig`: GPT-1's hyper-parameters, named as openai/finetune-transformer-lm's train.py."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from bert_tf.config_io import JsonConfig
from bert_tf.errors import UserInputError

# train.py's `act_fns`: the activations `--afn` may name (gelu is the tanh approximation).
SUPPORTED_AFNS = ("gelu", "relu", "swish")


class GptConfigError(UserInputError):
    """A GPT config file (or dict) that does not describe a valid GPT-1 model."""


@dataclasses.dataclass
class GptConfig(JsonConfig):
    """GPT-1 model hyper-parameters, named as train.py's flags and module globals.

    Defaults are train.py's (the released 12-layer model fine-tuned on ROCStories). Read with
    `from_json_file` (errors name the file and the field) or `from_dict`; written with
    `to_json_file` / `to_json_string` (sorted keys, indent 2).

    Attributes:
      n_vocab: BPE vocabulary size (40478 for the released encoder).
      n_special: special tokens appended after the vocabulary (`_start_`, `_delimiter_`,
        `_classify_` for ROCStories: 3).
      n_ctx: sequence length; also the number of position rows kept in the table.
      n_embd: model width.
      n_head: attention heads; must divide `n_embd`.
      n_layer: transformer blocks.
      embd_pdrop: dropout on the whole embedding table `we`.
      attn_pdrop: dropout on the attention probabilities.
      resid_pdrop: dropout on the attention and MLP outputs before each residual sum.
      clf_pdrop: dropout on the classify-token states (one mask shared by all choices).
      afn: MLP activation, one of `SUPPORTED_AFNS`.
    """

    n_vocab: int = 40478
    n_special: int = 3
    n_ctx: int = 512
    n_embd: int = 768
    n_head: int = 12
    n_layer: int = 12
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    resid_pdrop: float = 0.1
    clf_pdrop: float = 0.1
    afn: str = "gelu"

    config_error = GptConfigError
    config_file_kind = "GPT config file"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, source: str = "GptConfig") -> None:
        """Raises `GptConfigError` naming the first bad field (and `source`, e.g. the file)."""
        for field in dataclasses.fields(self):
            self.check_field_type(field, source)
            value = getattr(self, field.name)
            if field.type in ("int", int):
                minimum = 0 if field.name == "n_special" else 1
                if value < minimum:
                    raise GptConfigError(f"{source}: field '{field.name}' must be >= {minimum}, "
                                         f"got {value}")
            elif field.type in ("float", float):
                if not 0.0 <= value < 1.0:
                    raise GptConfigError(f"{source}: field '{field.name}' must be in [0, 1), "
                                         f"got {value}")
        if self.afn not in SUPPORTED_AFNS:
            raise GptConfigError(f"{source}: field 'afn' is {self.afn!r}; expected one of "
                                 f"{', '.join(SUPPORTED_AFNS)}")
        if self.n_embd % self.n_head:
            raise GptConfigError(f"{source}: field 'n_embd' ({self.n_embd}) is not a multiple of "
                                 f"'n_head' ({self.n_head})")

    @property
    def table_rows(self) -> int:
        """Rows of the combined table `we`: n_vocab + n_special + n_ctx."""
        return self.n_vocab + self.n_special + self.n_ctx

    @property
    def first_position_id(self) -> int:
        """Id of position 0 in `we` (train.py's `n_vocab + n_special`)."""
        return self.n_vocab + self.n_special

    @property
    def head_size(self) -> int:
        """n_embd / n_head."""
        return self.n_embd // self.n_head

    @classmethod
    def from_dict(cls, json_object: Mapping[str, Any], source: str = "GptConfig") -> "GptConfig":
        """Builds a config from a dict with train.py's names; unknown keys are an error, missing
        ones take train.py's defaults."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = cls.unknown_fields(json_object, known, source)
        if unknown:
            raise GptConfigError(f"{source}: unknown field(s) {', '.join(map(repr, unknown))}; "
                                 f"a GPT config has {', '.join(known)}")
        config = cls.__new__(cls)
        for field in dataclasses.fields(cls):
            setattr(config, field.name, json_object.get(field.name, field.default))
        config.validate(source)
        return config

    def to_dict(self) -> dict[str, Any]:
        """train.py's names and values."""
        return dataclasses.asdict(self)
