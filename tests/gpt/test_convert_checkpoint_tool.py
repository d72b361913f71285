"""tools/convert_checkpoint.py's GPT-1 directions, as a user runs them (real processes): OpenAI's
params folder -> .keras GptModel -> params folder loads into the same weights as the original."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.gpt.conftest import PROJECT_ROOT, fixture_config

pytestmark = pytest.mark.gpt_fixtures

TOOL = str(PROJECT_ROOT / "tools" / "convert_checkpoint.py")


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True,
                          env=env, cwd=PROJECT_ROOT, timeout=600)


@pytest.mark.long
def test_original_params_round_trip_through_keras(gpt_fixtures, gpt_fixture_json, tmp_path):
    config_file = tmp_path / "gpt_config.json"
    fixture_config(gpt_fixture_json, pdrop=0.1).to_json_file(config_file)
    keras_file = tmp_path / "gpt.keras"
    done = _run("--direction=gpt_original_to_keras", f"--gpt_config_file={config_file}",
                f"--input={gpt_fixtures / 'model'}", f"--output={keras_file}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert keras_file.is_file()

    params_dir = tmp_path / "params"
    done = _run("--direction=gpt_keras_to_original", f"--input={keras_file}",
                f"--output={params_dir}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (params_dir / "params_shapes.json").is_file()
    # The written folder loads (with train.py's loader) into exactly the weights the original
    # folder loads into. (Not byte-identical files: the loader keeps only n_ctx of the saved
    # position rows, so a model cannot write back the rows it never held.)
    from bert_tf.gpt.model import GptModel
    from bert_tf.checkpoints.openai import load_original_params
    config = fixture_config(gpt_fixture_json)
    models = []
    for folder in (gpt_fixtures / "model", params_dir):
        model = GptModel(config, clf_token=gpt_fixture_json["clf_token"])
        load_original_params(model, folder)
        models.append(dict(model.original_variables()))
    assert models[0].keys() == models[1].keys()
    for name in models[0]:
        if name.startswith("model/clf"):
            continue  # not in the original files: the classifier keeps its initialisation
        assert (models[0][name].numpy() == models[1][name].numpy()).all(), name


@pytest.mark.long
def test_bad_inputs_are_one_line(gpt_fixtures, tmp_path):
    done = _run("--direction=gpt_original_to_keras", f"--input={tmp_path / 'missing'}",
                f"--output={tmp_path / 'g.keras'}")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("error: --input=")
    assert "Traceback" not in done.stderr
    done = _run("--direction=gpt_original_to_keras", f"--input={gpt_fixtures / 'model'}",
                f"--output={tmp_path / 'g.keras'}")
    assert done.returncode == 1 and "--gpt_config_file" in done.stderr
    assert not (tmp_path / "g.keras").exists()
