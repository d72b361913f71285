"""Shared fixtures of the GPT-1 tests: the original's reference folder and a model loaded with its
initial parameters.

The folder is $BERT_TF_GPT_FIXTURES, default ../shared/fixtures/original_gpt. Sizes come from its
config.json, so another fixture set of the same layout can be used; tests skip with a clear
message when the folder is absent.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
from typing import Any

import numpy as np
import pytest

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
GPT_FIXTURES = pathlib.Path(os.environ.get(
    "BERT_TF_GPT_FIXTURES", PROJECT_ROOT.parent / "shared" / "fixtures" / "original_gpt"))


def _require(path: pathlib.Path) -> pathlib.Path:
    if not path.exists():
        pytest.skip(f"needs {path} (the original GPT-1 fixtures: ../shared/fixtures/original_gpt "
                    "or $BERT_TF_GPT_FIXTURES); it is absent here")
    return path


@pytest.fixture(scope="session")
def gpt_fixtures() -> pathlib.Path:
    """The fixture folder (skips when absent or without config.json)."""
    _require(GPT_FIXTURES / "config.json")
    return GPT_FIXTURES


@pytest.fixture(scope="session")
def gpt_fixture_json(gpt_fixtures: pathlib.Path) -> dict[str, Any]:
    """The folder's config.json."""
    return json.loads((gpt_fixtures / "config.json").read_text(encoding="utf-8"))


def fixture_config(fixture_json: dict[str, Any], pdrop: float = 0.0):
    """GptConfig of the fixture set with every dropout rate `pdrop`."""
    from bert_tf.gpt.config import GptConfig
    sizes = {k: fixture_json[k] for k in ("n_vocab", "n_special", "n_ctx", "n_embd", "n_head",
                                          "n_layer", "afn")}
    return GptConfig(**sizes, embd_pdrop=pdrop, attn_pdrop=pdrop, resid_pdrop=pdrop,
                     clf_pdrop=pdrop)


def train_mode_pdrop(manifest: dict[str, Any]) -> float:
    """The dropout rate a train-mode fixture's manifest names ("...clf_pdrop=0.1, ...")."""
    match = re.search(r"clf_pdrop=([0-9.]+)", manifest.get("mode", ""))
    if not match:
        pytest.fail("cannot read the dropout rate from the manifest's mode "
                    f"{manifest.get('mode')!r}")
    return float(match.group(1))


def build_fixture_model(fixture_dir: pathlib.Path, fixture_json: dict[str, Any],
                        pdrop: float = 0.0):
    """A GptModel of the fixture's sizes holding initial_params.npz (assigned by original name)."""
    from bert_tf.gpt.model import GptModel
    model = GptModel(fixture_config(fixture_json, pdrop), clf_token=fixture_json["clf_token"])
    initial = np.load(fixture_dir / "initial_params.npz")
    names = [name for name, _ in model.original_variables()]
    assert sorted(names) == sorted(initial.files), "variable names differ from initial_params.npz"
    for name, variable in model.original_variables():
        variable.assign(initial[name])
    return model


def load_inputs(folder: pathlib.Path) -> dict[str, Any]:
    """inputs.json of a forward/optimizer folder: X int32, M float32, Y int32 (when present)."""
    data = json.loads((folder / "inputs.json").read_text(encoding="utf-8"))
    out = {"X": np.asarray(data["X"], np.int32), "M": np.asarray(data["M"], np.float32)}
    if "Y" in data:
        out["Y"] = np.asarray(data["Y"], np.int32)
    return out
