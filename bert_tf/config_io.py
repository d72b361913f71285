"""The model configs' one JSON reader and writer (`BertConfig`, `GptConfig`).

`JsonConfig` is the mixin of a dataclass config: it reads a JSON file through `io_utils` (local
paths, gs://, ram://, ...), turns an unreadable file or bad JSON into one line of the class's own
error naming the file, and writes the config back as sorted, indented JSON, atomically. Each class
keeps its own rules in `from_dict` / `to_dict` (BERT keeps the fields it does not use, GPT-1
rejects them); `unknown_fields` and `check_field_type` are the checks both apply.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, ClassVar, Iterable, Mapping

from bert_tf.errors import UserInputError
from bert_tf.io_utils import atomic_write_text, open_file


class JsonConfig:
    """Mixin of a config dataclass read from and written to a JSON file.

    A class sets `config_error` (the `UserInputError` subclass its messages raise) and
    `config_file_kind` (how a message names its files, e.g. "BERT config file"), and defines
    `from_dict(json_object, source)` and `to_dict()`.
    """

    config_error: ClassVar[type[UserInputError]] = UserInputError
    config_file_kind: ClassVar[str] = "config file"

    @classmethod
    def from_dict(cls, json_object: Mapping[str, Any], source: str):
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_json_file(cls, json_file: str | os.PathLike):
        """Reads a config JSON file; errors (`config_error`) name the file and the field."""
        path = os.fspath(json_file)
        try:
            with open_file(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise cls.config_error(
                f"cannot read {cls.config_file_kind} {path}: {e.strerror}") from e
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise cls.config_error(
                f"{path}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}") from e
        return cls.from_dict(data, source=path)

    def to_json_string(self) -> str:
        """JSON text: sorted keys, indent 2, a trailing newline (as the original BERT writes
        bert_config.json)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, json_file: str | os.PathLike) -> None:
        """Writes the config atomically (never leaves a half-written file)."""
        atomic_write_text(json_file, self.to_json_string())

    @classmethod
    def unknown_fields(cls, json_object: Any, known: Iterable[str], source: str) -> list[str]:
        """The keys of `json_object` that are not in `known`, sorted; `config_error` naming
        `source` unless `json_object` is a JSON object (a mapping)."""
        if not isinstance(json_object, Mapping):
            raise cls.config_error(
                f"{source}: expected a JSON object, got {type(json_object).__name__}")
        return sorted(set(json_object) - set(known))

    def check_field_type(self, field: dataclasses.Field, source: str) -> None:
        """`config_error` naming `source` and the field unless an `int` field holds an integer
        (a bool is none) and a `float` field a number; other fields are not checked here."""
        value = getattr(self, field.name)
        if field.type in ("int", int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.config_error(f"{source}: field '{field.name}' must be an integer, "
                                        f"got {value!r} ({type(value).__name__})")
        elif field.type in ("float", float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.config_error(f"{source}: field '{field.name}' must be a number, "
                                        f"got {value!r} ({type(value).__name__})")
