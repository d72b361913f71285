"""OpenAIAdam and the schedules against the original's 3 training steps and schedule values."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import UserInputError
from tests.gpt.conftest import build_fixture_model, load_inputs

# README §6 tolerances.
ATOL_LOSS = 1e-5
ATOL_LOGITS = 5e-5
ATOL_GRADS = 2e-6
ATOL_SLOTS = 1e-7
ATOL_SCHEDULE = 1e-6
ATOL_PARAMS_BIG_GRAD = 1e-6  # entries whose |step-1 grad| >= 1e-5
ATOL_PARAMS_OTHER = 2e-5
ATOL_PARAMS_NOISE = 1e-4  # key-bias thirds of c_attn/b and clf/b (true gradient exactly 0)
BIG_GRAD = 1e-5


@pytest.mark.gpt_fixtures
def test_schedules_match_original(gpt_fixtures):
    from bert_tf.training.openai_adam import SCHEDULES
    data = json.loads((gpt_fixtures / "schedules" / "schedules.json").read_text())
    x = np.asarray(data["x_float32"], np.float32)
    checked = 0
    for key, expected in data["values"].items():
        name, warmup = key.split("@")
        actual = SCHEDULES[name](x, warmup=float(warmup)).numpy()
        np.testing.assert_allclose(actual, expected, rtol=0, atol=ATOL_SCHEDULE, err_msg=key)
        checked += 1
    assert checked == len(SCHEDULES) * len(data["warmups"])


def test_schedule_shapes():
    from bert_tf.training.openai_adam import warmup_constant, warmup_cosine, warmup_linear
    x = np.asarray([0.0, 0.1, 1.0, 1.5], np.float32)
    np.testing.assert_allclose(warmup_linear(x, 0.1), [0.0, 0.9, 0.0, -0.5], atol=1e-7)
    np.testing.assert_allclose(warmup_cosine(x, 0.1), [0.0, 1.0, 0.0, 0.5], atol=1e-7)
    np.testing.assert_allclose(warmup_constant(x, 0.1), [0.0, 1.0, 1.0, 1.0], atol=1e-7)


def _masks_for_params(name, grad, n_embd):
    """(noise, big) boolean masks of one variable's entries."""
    noise = np.zeros(grad.shape, bool)
    if name.endswith("/attn/c_attn/b"):
        noise[n_embd:2 * n_embd] = True
    if name == "model/clf/b":
        noise[...] = True
    big = (np.abs(grad) >= BIG_GRAD) & ~noise
    return noise, big


def _run_three_steps(gpt_fixtures, gpt_fixture_json, vector_l2: bool, compiled: bool = False,
                     fused: bool = False):
    from bert_tf.gpt.model import original_inputs
    from bert_tf.training.openai_adam import OpenAIAdam
    folder = gpt_fixtures / "optimizer"
    log = json.loads((folder / "training_log.json").read_text())
    run = log["run_parameters"]
    lm_coef = float(re.search(r"lm_coef=([0-9.]+)", run["loss"]).group(1))
    kwargs = dict(run["adam_kwargs"], vector_l2=vector_l2)
    model = build_fixture_model(gpt_fixtures, gpt_fixture_json, pdrop=0.0)
    optimizer = OpenAIAdam(learning_rate=run["lr"], t_total=run["n_updates_total (t_total)"],
                           schedule=run["lr_schedule"], warmup=run["lr_warmup"], fused=fused,
                           **kwargs)
    inputs = load_inputs(folder)
    X, M, Y = inputs["X"], inputs["M"], inputs["Y"]
    names = [n for n, _ in model.original_variables()]
    variables = [v for _, v in model.original_variables()]

    def forward():
        out = model(original_inputs(X), training=True)
        return out, model.compute_losses(out, X[..., 0], M, Y, lm_coef=lm_coef)

    def gradients():
        with tf.GradientTape() as tape:
            out, losses = forward()
        grads = tape.gradient(losses["train_loss"], variables)
        return out, losses, [tf.convert_to_tensor(g) for g in grads]

    def apply(grads):
        optimizer.apply_gradients(zip(grads, variables))

    if compiled:  # one traced graph per step function, as a Keras train step runs
        gradients, apply = tf.function(gradients), tf.function(apply)
    records = []
    for _ in range(3):
        out, losses, grads = gradients()
        records.append({
            "t_before": int(optimizer.iterations.numpy()),
            "lrt": float(optimizer.step_size().numpy()),
            "train_loss": float(losses["train_loss"]),
            "clf_loss": float(tf.reduce_mean(losses["clf_losses"])),
            "lm_loss": float(tf.reduce_mean(losses["lm_losses"])),
            "clf_losses": losses["clf_losses"].numpy(),
            "lm_losses": losses["lm_losses"].numpy().reshape(-1),
            "clf_logits": out["clf_logits"].numpy(),
            "norm": float(tf.linalg.global_norm(grads)),
            "grads": {n: g.numpy() for n, g in zip(names, grads)},
        })
        apply(grads)
    _, final = forward()
    return model, optimizer, records, final, log


def _check_steps(records, final, logged_steps, logged_final):
    for ours, ref in zip(records, logged_steps, strict=True):
        assert ours["t_before"] == ref["t_before"]
        np.testing.assert_allclose(ours["lrt"], ref["lrt"], rtol=1e-6, atol=0)
        for key in ("train_loss", "clf_loss", "lm_loss", "clf_losses", "lm_losses"):
            np.testing.assert_allclose(ours[key], ref[key], rtol=0, atol=ATOL_LOSS, err_msg=key)
        np.testing.assert_allclose(ours["clf_logits"], ref["clf_logits"], atol=ATOL_LOGITS)
        np.testing.assert_allclose(ours["norm"], ref["global_grad_norm_before_clip"],
                                   atol=ATOL_LOSS)
        assert (ours["norm"] > 1.0) == ref["clipped"]
    np.testing.assert_allclose(float(final["train_loss"]), logged_final["train_loss"],
                               atol=ATOL_LOSS)
    np.testing.assert_allclose(final["clf_losses"], logged_final["clf_losses"], atol=ATOL_LOSS)
    np.testing.assert_allclose(np.reshape(final["lm_losses"], -1), logged_final["lm_losses"],
                               atol=ATOL_LOSS)


def _check_params(model, expected, step1_grads, n_embd):
    worst = {"big": 0.0, "other": 0.0, "noise": 0.0}
    for name, variable in model.original_variables():
        diff = np.abs(variable.numpy() - expected[name])
        noise, big = _masks_for_params(name, step1_grads[name], n_embd)
        other = ~noise & ~big
        for part, mask, atol in (("big", big, ATOL_PARAMS_BIG_GRAD),
                                 ("other", other, ATOL_PARAMS_OTHER),
                                 ("noise", noise, ATOL_PARAMS_NOISE)):
            if mask.any():
                worst[part] = max(worst[part], float(diff[mask].max()))
                assert diff[mask].max() <= atol, (name, part, float(diff[mask].max()))
    return worst


@pytest.mark.gpt_fixtures
@pytest.mark.parametrize("fused", [False, True], ids=["op_by_op", "fused"])
def test_three_steps_with_vector_l2(gpt_fixtures, gpt_fixture_json, fused):
    """Also with `fused=True` (one ResourceApplyAdam kernel per variable): the same tolerances."""
    folder = gpt_fixtures / "optimizer"
    model, optimizer, records, final, log = _run_three_steps(gpt_fixtures, gpt_fixture_json, True,
                                                             fused=fused)
    assert log["run_parameters"]["adam_kwargs"]["vector_l2"] is True
    _check_steps(records, final, log["steps"], log["after_3_steps_forward"])
    step1 = np.load(folder / "step1_grads_preclip.npz")
    grad_diff = max(float(np.abs(records[0]["grads"][n] - step1[n]).max()) for n in step1.files)
    assert grad_diff <= ATOL_GRADS, grad_diff
    worst = _check_params(model, np.load(folder / "after_3_steps_params.npz"), step1,
                          gpt_fixture_json["n_embd"])
    slots = np.load(folder / "after_3_steps_adam_slots.npz")
    slot_diff = 0.0
    for name, variable in model.original_variables():
        m, v = optimizer.slots(variable)
        slot_diff = max(slot_diff, float(np.abs(m.numpy() - slots[f"m/{name}"]).max()),
                        float(np.abs(v.numpy() - slots[f"v/{name}"]).max()))
    assert slot_diff <= ATOL_SLOTS, slot_diff
    assert float(optimizer.iterations.numpy()) == float(slots["t"])
    print("vector_l2=True", json.dumps({"grads": grad_diff, "slots": slot_diff, **worst}))


@pytest.mark.gpt_fixtures
@pytest.mark.parametrize("compiled, fused", [(False, False), (True, False), (True, True)],
                         ids=["eager", "tf_function", "tf_function_fused"])
def test_three_steps_without_vector_l2(gpt_fixtures, gpt_fixture_json, compiled, fused):
    """In a traced graph too, the schedule reads t before the increment (no race)."""
    folder = gpt_fixtures / "optimizer"
    model, _, records, final, log = _run_three_steps(gpt_fixtures, gpt_fixture_json, False,
                                                     compiled=compiled, fused=fused)
    variant = log["variant_vector_l2_false"]
    _check_steps(records, final, variant["steps"], variant["after_3_steps_forward"])
    step1 = np.load(folder / "step1_grads_preclip.npz")
    worst = _check_params(model, np.load(folder / "after_3_steps_params_no_vector_l2.npz"), step1,
                          gpt_fixture_json["n_embd"])
    print("vector_l2=False", json.dumps(worst))


@pytest.mark.gpt_fixtures
def test_race_study_majority_is_the_chosen_semantics(gpt_fixtures, gpt_fixture_json):
    """race_study.json: the literal train.py step read t before the increment in (nearly) every
    step; that is the semantics OpenAIAdam implements deterministically."""
    study = json.loads((gpt_fixtures / "optimizer" / "race_study.json").read_text())
    steps = [step for run in study["runs"] for step in run["steps"]]
    assert len(study["runs"]) == study["repeats"]
    n_vars = gpt_fixture_json["n_trainable_variables"]
    for step in steps:
        assert (step["n_params_schedule_read_t_before"]
                + step["n_params_schedule_read_t_before_plus_1"]) == n_vars
    pre = sum(step["n_params_schedule_read_t_before"] == n_vars for step in steps)
    assert pre > len(steps) // 2


@pytest.mark.parametrize("fused", [False, True], ids=["op_by_op", "fused"])
def test_first_update_has_lr_zero_and_l2_inside_the_step(fused):
    """Step 1 (x = 0) leaves p unchanged but moves m, v; step 2's L2 term uses p before the
    update and the full lrt (bias correction and schedule). The lr shown (`learning_rate`) is
    the scheduled one."""
    from bert_tf.training.openai_adam import OpenAIAdam
    p = tf.Variable([[1.0, -2.0]])
    b = tf.Variable([3.0])
    opt = OpenAIAdam(learning_rate=0.1, t_total=10, schedule="warmup_constant", warmup=0.05,
                     l2=0.5, max_grad_norm=-1, fused=fused)
    assert float(opt.learning_rate) == 0.0 and float(opt.base_learning_rate) == pytest.approx(0.1)
    g = [tf.constant([[0.5, 0.5]]), tf.constant([0.5])]
    opt.apply_gradients(zip(g, [p, b]))
    np.testing.assert_array_equal(p.numpy(), [[1.0, -2.0]])
    np.testing.assert_allclose(opt.slots(p)[0].numpy(), [[0.05, 0.05]], rtol=1e-6)
    assert float(opt.learning_rate) == pytest.approx(0.1)  # x = 0.1 > warmup: schedule 1
    opt.apply_gradients(zip(g, [p, b]))
    lrt = 0.1 * np.sqrt(1 - 0.999 ** 2) / (1 - 0.9 ** 2) * 1.0
    m = 0.9 * 0.05 + 0.1 * 0.5
    v = 0.999 * 0.00025 + 0.001 * 0.25
    step = m / (np.sqrt(v) + 1e-8)
    np.testing.assert_allclose(p.numpy(), [[1 - lrt * (step + 0.5), -2 - lrt * (step - 1.0)]],
                               rtol=1e-5)
    np.testing.assert_allclose(b.numpy(), [3 - lrt * step], rtol=1e-5)  # rank 1: no L2


def test_bad_optimizer_arguments():
    from bert_tf.training.openai_adam import OpenAIAdam
    with pytest.raises(UserInputError, match="schedule 'warmup_exp' is unknown"):
        OpenAIAdam(t_total=10, schedule="warmup_exp")
    with pytest.raises(UserInputError, match="t_total must be a positive"):
        OpenAIAdam(t_total=0)
    with pytest.raises(UserInputError, match="weight_decay is not part of the original"):
        OpenAIAdam(t_total=3, weight_decay=0.1)


def test_optimizer_config_round_trip():
    from bert_tf.training.openai_adam import OpenAIAdam
    import keras
    opt = OpenAIAdam(learning_rate=1e-3, t_total=7, schedule="warmup_cosine", warmup=0.1,
                     vector_l2=True, max_grad_norm=2)
    clone = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
    assert isinstance(clone, OpenAIAdam)
    assert clone.get_config() == opt.get_config()
