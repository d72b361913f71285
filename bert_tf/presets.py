"""Named presets: the published BERT model configs of `official_configs/models/*.json`.

A preset name is the file name without `.json`, which is also the name of Google's release folder
(`uncased_L-12_H-768_A-12`, `cased_L-24_H-1024_A-16`, the 24 miniatures `uncased_L-{2..12}_H-
{128..768}_A-{2..12}`, `chinese_L-12_H-768_A-12`, `multi_cased_L-12_H-768_A-12`,
`multilingual_L-12_H-768_A-12`). A preset is an architecture only: bert_tf ships no pretrained
weights and no vocab files (the release's files are downloaded from Google; see the README), so
`bert_tf.from_pretrained(preset)` builds a randomly initialised model of that shape.

    >>> from bert_tf.presets import list_presets
    >>> "uncased_L-12_H-768_A-12" in list_presets()
    True
"""
from __future__ import annotations

import os
import pathlib
import warnings

from bert_tf.modeling.config import BertConfig, ConfigError

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
# Installed wheels may carry the configs inside the package; a checkout has them beside it.
_CANDIDATE_DIRS = (_PACKAGE_DIR / "official_configs" / "models",
                   _PACKAGE_DIR.parent / "official_configs" / "models")


def presets_dir() -> pathlib.Path:
    """The folder of the preset configs (`official_configs/models/`)."""
    for candidate in _CANDIDATE_DIRS:
        if candidate.is_dir():
            return candidate
    raise ConfigError("the preset configs (official_configs/models/*.json) are not installed: "
                      f"looked in {', '.join(str(c) for c in _CANDIDATE_DIRS)}")


def list_presets() -> list[str]:
    """The preset names, sorted (one per `official_configs/models/*.json`)."""
    return sorted(p.stem for p in presets_dir().glob("*.json"))


def is_preset(name: str | os.PathLike) -> bool:
    """Whether `name` is a preset name (not a path)."""
    name = os.fspath(name)
    return os.sep not in name and name in list_presets()


def preset_config_file(name: str) -> pathlib.Path:
    """The `bert_config.json` of preset `name`; ConfigError listing the presets if unknown."""
    if not is_preset(name):
        raise ConfigError(f"unknown preset {name!r}; the presets are {', '.join(list_presets())}")
    return presets_dir() / f"{name}.json"


def preset_config(name: str) -> BertConfig:
    """The `BertConfig` of preset `name` (extra keys of the Chinese/multilingual configs kept,
    without the unknown-field warning: they are the published files)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return BertConfig.from_json_file(preset_config_file(name))


def lower_case_of_name(name: str) -> bool | None:
    """The casing a model of this (release or folder) name was pre-trained with: False for
    `cased` models (`cased_*`, `multi_cased_*`, `wwm_cased_*`), True for `uncased_*`,
    `multilingual_*` (uncased) and `chinese_*`; None when the name does not say."""
    parts = pathlib.PurePath(os.fspath(name)).name.lower().replace("-", "_").split("_")
    if "cased" in parts:
        return False
    if "uncased" in parts or "multilingual" in parts or "chinese" in parts:
        return True
    return None
