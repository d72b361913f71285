"""Run options declared once: dataclass fields whose metadata carries the command-line help.

Every tool's options are one dataclass (e.g. `bert_tf.tasks.classifier.ClassifierRunOptions`,
`bert_tf.runs.bert_pretraining.PretrainingRun`). `bert_tf.cli.flags_from_options` turns its
fields into absl flags (name = field name, help = the `option(...)` help, default = the field's
default, type from the annotation) and the parsed flags back into the dataclass, so a flag is
never declared by hand.

How to add an option to a tool:

    @dataclasses.dataclass(kw_only=True)
    class ClassifierRunOptions(EvaluatingRunOptions):
        ...
        my_new_option: int = option(3, "What it does, as --help should say it.")

That is all: `--my_new_option` now exists in `tools/run_classifier.py` (and the console script),
with that default and help, and `opts.my_new_option` reaches the library. Types map to flags as:
`str` -> DEFINE_string, `int` -> DEFINE_integer, `float` -> DEFINE_float, `bool` -> DEFINE_bool,
`choices=[...]` -> DEFINE_enum, `list[...]`/`Sequence[...]` -> DEFINE_list (elements converted
to the annotated type), `multi=True` -> DEFINE_multi_string. `X | None` is a flag with default
None. A field without a default is a required flag. `flag="other_name"` gives the flag another
name than the field (keep the original scripts' flag names). `positional=True` receives the
command line's non-flag arguments instead of being a flag (e.g. the sweep's script arguments).

This module has no TensorFlow or absl dependency, so options can be declared anywhere.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

MISSING = dataclasses.MISSING


def option(default: Any = MISSING, help: str = "", *,  # noqa: A002 (the flag's help)
           choices: Sequence[str] | None = None, flag: str | None = None,
           multi: bool = False, positional: bool = False, required: bool = False) -> Any:
    """A dataclass field that is also a command-line flag.

    Args:
      default: the default value (also the flag's default); leave out for a required option.
        Lists are copied per instance (a `default_factory`).
      help: the flag's help text.
      choices: allowed values (an enum flag).
      flag: the flag's name when it differs from the field's (original flag names).
      multi: a repeatable string flag (`--text=a --text=b`), value a list or None.
      positional: filled from the non-flag command-line arguments (a list), not a flag.
      required: the flag is required although the dataclass has a default (for dataclasses
        whose fields are also given positionally).
    """
    metadata = {"help": help, "choices": tuple(choices) if choices is not None else None,
                "flag": flag, "multi": multi, "positional": positional,
                "required": required}
    if isinstance(default, (list, dict, set)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def option_help(field: dataclasses.Field) -> str:
    """The help text of a field declared with `option` ("" for a plain field)."""
    return field.metadata.get("help", "")


def integer_list(text: str, flag: str, error: type[Exception] = ValueError) -> list[int]:
    """The integers of a comma-separated flag value (`"1,2,3"` -> [1, 2, 3]; blanks ignored).

    Raises `error` naming `--flag` and the value when it holds no integer or a non-integer."""
    try:
        values = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        values = []
    if not values:
        raise error(f"--{flag}={text!r}: expected comma-separated integers")
    return values
