"""The original params folder: loading as train.py does, writing back byte-identically, errors."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bert_tf.errors import UserInputError
from tests.gpt.conftest import fixture_config


def _model(fixture_json):
    from bert_tf.gpt.model import GptModel
    return GptModel(fixture_config(fixture_json), clf_token=fixture_json["clf_token"])


@pytest.mark.gpt_fixtures
def test_loader_equals_initial_params_exactly(gpt_fixtures, gpt_fixture_json):
    from bert_tf.checkpoints.openai import load_original_params
    model = _model(gpt_fixture_json)
    assigned = load_original_params(model, gpt_fixtures / "model",
                                    n_transfer=gpt_fixture_json["n_transfer_layers"],
                                    seed=gpt_fixture_json["seed"])
    assert len(assigned) == gpt_fixture_json["n_transferred_arrays"]
    initial = np.load(gpt_fixtures / "initial_params.npz")
    listed = [line.split("\t") for line in
              (gpt_fixtures / "variables.txt").read_text().splitlines() if line.strip()]
    names = [name for name, _ in listed]
    assert [n for n, _ in model.original_variables()] == names
    for (name, shape), (_, variable) in zip(listed, model.original_variables()):
        assert json.loads(shape) == list(variable.shape), name
    assert sum(int(np.prod(v.shape)) for _, v in model.original_variables()) == \
        gpt_fixture_json["n_trainable_parameters"]
    assert len(model.trainable_variables) == gpt_fixture_json["n_trainable_variables"]
    assert assigned == names[:len(assigned)]
    for name, variable in model.original_variables():
        if name in assigned:
            np.testing.assert_array_equal(variable.numpy(), initial[name], err_msg=name)
    # Another seed changes exactly the special rows.
    other = _model(gpt_fixture_json)
    load_original_params(other, gpt_fixtures / "model", seed=gpt_fixture_json["seed"] + 1)
    diff = np.any(other.embedding.we.numpy() != initial["model/we"], axis=1)
    n_vocab, n_special = gpt_fixture_json["n_vocab"], gpt_fixture_json["n_special"]
    assert np.flatnonzero(diff).tolist() == list(range(n_vocab, n_vocab + n_special))


@pytest.mark.gpt_fixtures
def test_n_transfer_minus_one_and_zero(gpt_fixtures, gpt_fixture_json):
    from bert_tf.checkpoints.openai import load_original_params
    seed = gpt_fixture_json["seed"]
    assert load_original_params(_model(gpt_fixture_json), gpt_fixtures / "model",
                                n_transfer=-1, seed=seed) == []
    assert load_original_params(_model(gpt_fixture_json), gpt_fixtures / "model",
                                n_transfer=0, seed=seed) == ["model/we"]


@pytest.mark.gpt_fixtures
def test_writer_round_trip_is_byte_identical(gpt_fixtures, gpt_fixture_json, tmp_path):
    from bert_tf.checkpoints.openai import (N_PARAM_FILES, read_original_param_files,
                                       write_original_param_files)
    arrays = read_original_param_files(gpt_fixtures / "model")
    assert len(arrays) == gpt_fixture_json["n_pretrained_arrays"]
    assert arrays[0].shape[0] == gpt_fixture_json["n_ctx_saved_positions"]
    write_original_param_files(tmp_path / "out", arrays)
    names = ["params_shapes.json"] + [f"params_{n}.npy" for n in range(N_PARAM_FILES)]
    for name in names:
        written = (tmp_path / "out" / name).read_bytes()
        assert written == (gpt_fixtures / "model" / name).read_bytes(), name
    sizes = [np.load(tmp_path / "out" / f"params_{n}.npy").size for n in range(N_PARAM_FILES)]
    assert sizes == gpt_fixture_json["params_npy_chunk_sizes"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(names)  # no temp files
    with pytest.raises(UserInputError, match="exists; refusing to overwrite"):
        write_original_param_files(tmp_path / "out", arrays)


@pytest.mark.gpt_fixtures
def test_model_written_and_reloaded(gpt_fixtures, gpt_fixture_json, tmp_path):
    from bert_tf.checkpoints.openai import load_original_params, save_original_params
    seed = gpt_fixture_json["seed"]
    model = _model(gpt_fixture_json)
    load_original_params(model, gpt_fixtures / "model", seed=seed)
    save_original_params(model, tmp_path / "saved")
    shapes = json.loads((tmp_path / "saved" / "params_shapes.json").read_text())
    assert shapes[0] == [gpt_fixture_json["n_ctx"], gpt_fixture_json["n_embd"]]
    reloaded = _model(gpt_fixture_json)
    names = load_original_params(reloaded, tmp_path / "saved", seed=seed)
    for (name, a), (_, b) in zip(model.original_variables(), reloaded.original_variables()):
        if name in names:
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


@pytest.fixture
def params_copy(gpt_fixtures, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(gpt_fixtures / "model", folder)
    return folder


@pytest.mark.gpt_fixtures
def test_missing_param_file(params_copy, gpt_fixture_json):
    from bert_tf.checkpoints.openai import load_original_params
    (params_copy / "params_7.npy").unlink()
    with pytest.raises(UserInputError, match=r"params_7.npy: missing"):
        load_original_params(_model(gpt_fixture_json), params_copy)
    (params_copy / "params_shapes.json").unlink()
    with pytest.raises(UserInputError, match=r"params_shapes.json: missing"):
        load_original_params(_model(gpt_fixture_json), params_copy)


@pytest.mark.gpt_fixtures
@pytest.mark.parametrize("edit, message", [
    (lambda s: s[:-1], "the shapes add up to"),
    (lambda s: s[:1] + [[s[1][0], "64"]] + s[2:], r"entry 1 is \[.*'64'\]; expected a list of "
                                                  "positive integers"),
    (lambda s: {"shapes": s}, "expected a non-empty JSON list"),
])
def test_wrong_shapes_list(params_copy, gpt_fixture_json, edit, message):
    from bert_tf.checkpoints.openai import load_original_params
    path = params_copy / "params_shapes.json"
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    model = _model(gpt_fixture_json)
    before = [v.numpy().copy() for _, v in model.original_variables()]
    with pytest.raises(UserInputError, match=message) as info:
        load_original_params(model, params_copy)
    assert "params_shapes.json" in str(info.value) and "\n" not in str(info.value)
    for b, (_, v) in zip(before, model.original_variables()):
        np.testing.assert_array_equal(b, v.numpy())


@pytest.mark.gpt_fixtures
def test_shapes_disagreeing_with_the_config(gpt_fixtures, gpt_fixture_json):
    from bert_tf.gpt.model import GptModel
    from bert_tf.checkpoints.openai import load_original_params
    import dataclasses
    base = fixture_config(gpt_fixture_json)
    cases = [
        (dataclasses.replace(base, n_vocab=base.n_vocab + 1), "token table .* the config expects"),
        (dataclasses.replace(base, n_ctx=gpt_fixture_json["n_ctx_saved_positions"] + 1),
         "position table .* needs at least"),
        (dataclasses.replace(base, n_embd=base.n_embd * 2, n_head=base.n_head), "position table"),
        (dataclasses.replace(base, n_layer=base.n_layer - 1),
         f"the files hold {base.n_layer} layers but the model has {base.n_layer - 1}; pass "
         f"n_transfer={base.n_layer - 1}"),
    ]
    for config, message in cases:
        model = GptModel(config)
        with pytest.raises(UserInputError, match=message):
            load_original_params(model, gpt_fixtures / "model")
    # Fewer layers transferred on purpose, as train.py's --n_transfer allows: fine.
    smaller = GptModel(dataclasses.replace(base, n_layer=base.n_layer - 1))
    assert len(load_original_params(smaller, gpt_fixtures / "model",
                                    n_transfer=base.n_layer - 1)) == 1 + 12 * (base.n_layer - 1)


@pytest.mark.gpt_fixtures
def test_conversion_to_keras_and_back(gpt_fixtures, gpt_fixture_json, tmp_path):
    from bert_tf.checkpoints.openai import (keras_to_original_params, original_params_to_keras,
                                       read_original_param_files)
    config = fixture_config(gpt_fixture_json)
    original_params_to_keras(gpt_fixtures / "model", config, tmp_path / "gpt.keras",
                             seed=gpt_fixture_json["seed"])
    with pytest.raises(UserInputError, match="exists; refusing to overwrite"):
        original_params_to_keras(gpt_fixtures / "model", config, tmp_path / "gpt.keras")
    keras_to_original_params(tmp_path / "gpt.keras", tmp_path / "back")
    source = read_original_param_files(gpt_fixtures / "model")
    back = read_original_param_files(tmp_path / "back")
    n_ctx = gpt_fixture_json["n_ctx"]
    np.testing.assert_array_equal(back[0], source[0][:n_ctx])  # positions cut to n_ctx
    for a, b in zip(source[1:], back[1:], strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(UserInputError, match="no such .keras file"):
        keras_to_original_params(tmp_path / "missing.keras", tmp_path / "x")
