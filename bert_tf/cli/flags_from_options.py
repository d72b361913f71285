"""absl flags generated from an options dataclass (see `bert_tf.options` for how to declare one).

`flag_specs(Options)` lists what each field becomes, `define_flags(Options, flag_values)` defines
the flags, `options_from_flags(Options, flag_values, args)` builds the dataclass from the parsed
values. No tool defines a flag by hand.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import re
import types
import typing
from typing import Any, Sequence

from absl import flags

from bert_tf.errors import UserInputError


@dataclasses.dataclass(frozen=True)
class FlagSpec:
    """What one dataclass field becomes on the command line.

    Attributes:
      field: the dataclass field name.
      name: the flag name (the field name unless the field says `flag=`).
      kind: "string", "integer", "float", "bool", "enum", "list" or "multi_string".
      default: the flag's default (lists as strings, as absl shows them).
      help: the help text ("" when the field has none; the test of the tools rejects that).
      required: the field has no default.
      choices: enum values.
      element_type: list elements' type (str, int or float).
    """

    field: str
    name: str
    kind: str
    default: Any
    help: str
    required: bool = False
    choices: tuple[str, ...] | None = None
    element_type: type = str


_SCALAR_KINDS = {str: "string", int: "integer", float: "float", bool: "bool"}


def _strip_optional(tp: Any) -> Any:
    """`X | None` / `Optional[X]` / `X | Y` -> X (the first non-None member)."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        return members[0]
    return tp


def _is_list(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    return origin in (list, tuple, collections.abc.Sequence, typing.Sequence) or tp in (list,
                                                                                        tuple)


_ATTRIBUTE_RE = re.compile(r"^(\w+(?:, \w+)*): ?(.*)$")


def docstring_attributes(cls: type) -> dict[str, str]:
    """The "Attributes:" section of a class docstring (Google style): {name: text}.

    `a, b: text` gives both names the text. This is where a dataclass declared without `option`
    metadata (e.g. `PretrainingDataOptions`) keeps the help of its fields.
    """
    doc = cls.__dict__.get("__doc__") or ""
    lines = inspect.cleandoc(doc).splitlines()
    out: dict[str, str] = {}
    try:
        i = next(k for k, line in enumerate(lines) if line.strip() == "Attributes:") + 1
    except StopIteration:
        return out
    indent, names = None, []
    for line in lines[i:]:
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width < indent or width == 0:
            break
        match = _ATTRIBUTE_RE.match(line.strip()) if width == indent else None
        if match:
            names = match.group(1).split(", ")
            for name in names:
                out[name] = match.group(2).strip()
        else:
            for name in names:
                out[name] = (out[name] + " " + line.strip()).strip()
    return out


def field_help(options_class: type, field: dataclasses.Field) -> str:
    """The help of a field: its `option(help=...)`, else the "Attributes:" entry of the nearest
    class in the MRO whose docstring documents it, else ""."""
    if field.metadata.get("help"):
        return field.metadata["help"]
    for klass in options_class.__mro__:
        text = docstring_attributes(klass).get(field.name)
        if text:
            return text
    return ""


def _field_default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    return None


def flag_specs(options_class: type) -> list[FlagSpec]:
    """One `FlagSpec` per flag-bearing field of `options_class` (positional fields excluded)."""
    if not dataclasses.is_dataclass(options_class):
        raise TypeError(f"{options_class!r} is not a dataclass")
    hints = typing.get_type_hints(options_class)
    specs = []
    for field in dataclasses.fields(options_class):
        meta = field.metadata
        if meta.get("positional"):
            continue
        tp = _strip_optional(hints[field.name])
        default = _field_default(field)
        required = bool(meta.get("required")) or (
            field.default is dataclasses.MISSING
            and field.default_factory is dataclasses.MISSING)  # type: ignore[misc]
        name = meta.get("flag") or field.name
        help_text = field_help(options_class, field)
        choices = meta.get("choices")
        element_type: type = str
        if meta.get("multi"):
            kind = "multi_string"
        elif choices:
            kind = "enum"
        elif _is_list(tp):
            kind = "list"
            args = typing.get_args(tp)
            element_type = _strip_optional(args[0]) if args else str
            if default is not None:
                default = [str(x) for x in default]
        elif tp in _SCALAR_KINDS:
            kind = _SCALAR_KINDS[tp]
        else:
            raise TypeError(f"{options_class.__name__}.{field.name}: no flag type for {tp!r}")
        specs.append(FlagSpec(field=field.name, name=name, kind=kind, default=default,
                              help=help_text, required=required, choices=choices,
                              element_type=element_type))
    return specs


def positional_field(options_class: type) -> str | None:
    """The field that receives the non-flag command-line arguments, if any."""
    for field in dataclasses.fields(options_class):
        if field.metadata.get("positional"):
            return field.name
    return None


def define_flags(options_class: type, flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
    """Defines one flag per field of `options_class` in `flag_values`; returns the flag names.

    A flag already defined (e.g. a second call in one process) is left as it is. Required
    fields are marked required.
    """
    definers = {"string": flags.DEFINE_string, "integer": flags.DEFINE_integer,
                "float": flags.DEFINE_float, "bool": flags.DEFINE_bool,
                "list": flags.DEFINE_list, "multi_string": flags.DEFINE_multi_string}
    names = []
    for spec in flag_specs(options_class):
        names.append(spec.name)
        if spec.name in flag_values:
            continue
        if spec.kind == "enum":
            flags.DEFINE_enum(spec.name, spec.default, list(spec.choices), spec.help,
                              flag_values=flag_values)
        else:
            definers[spec.kind](spec.name, spec.default, spec.help, flag_values=flag_values)
        if spec.required:
            flags.mark_flag_as_required(spec.name, flag_values=flag_values)
    return names


def _convert_list(spec: FlagSpec, values: Sequence[str] | None) -> list | None:
    if values is None or spec.element_type is str:
        return None if values is None else list(values)
    out = []
    for value in values:
        try:
            out.append(spec.element_type(value))
        except ValueError:
            raise UserInputError(f"--{spec.name}: {value!r} is not a valid "
                                 f"{spec.element_type.__name__}") from None
    return out


def options_from_flags(options_class: type, flag_values: flags.FlagValues = flags.FLAGS,
                       args: Sequence[str] = ()) -> Any:
    """The dataclass built from parsed flags (and `args`, the non-flag arguments).

    Raises:
      UserInputError: a list element of the wrong type, or non-flag arguments to a tool that
        takes none.
    """
    kwargs = {}
    for spec in flag_specs(options_class):
        value = flag_values[spec.name].value
        if spec.kind == "list":
            value = _convert_list(spec, value)
        kwargs[spec.field] = value
    positional = positional_field(options_class)
    if positional:
        kwargs[positional] = list(args)
    elif args:
        raise UserInputError(f"unexpected command-line arguments {list(args)} (flags are "
                             "written --name=value)")
    return options_class(**kwargs)
