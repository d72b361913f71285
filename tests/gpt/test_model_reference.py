"""GptModel against the original's forward passes (forward_roc, forward_single,
forward_train_dropout) with the README's tolerances, the user API, and `.keras` round trip."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import UserInputError
from tests.gpt.conftest import build_fixture_model, load_inputs, train_mode_pdrop

# README §6 "suggested tolerances (float32)".
ATOL_HIDDEN = 1e-5  # hidden states, clf_h, losses
ATOL_LOGITS = 5e-5
ATOL_PROBS = 1e-6


def _run(model, X, M, Y, training: bool):
    from bert_tf.gpt.model import original_inputs
    out = model(original_inputs(X), training=training, return_intermediates=True)
    losses = model.compute_losses(out, X[..., 0], M, Y)
    return out, losses


def _compare(out, losses, ref, X, n_ctx):
    """Checks every reference key; returns {key: max abs diff}."""
    n_seq = int(np.prod(X.shape[:-2]))
    seq = X.shape[-2]
    ours = {
        "embed_output": out["embed_output"].numpy().reshape(n_seq, seq, -1),
        "block_outputs": out["block_outputs"].numpy().reshape(-1, n_seq, seq,
                                                              out["block_outputs"].shape[-1]),
        "h_final": out["hidden_states"].numpy().reshape(n_seq, seq, -1),
        "attn_probs": out["attention_probs"].numpy().reshape(ref["attn_probs"].shape),
        "lm_logits": out["lm_logits"].numpy().reshape(n_seq * (seq - 1), -1),
        "lm_targets": X.reshape(n_seq, seq, 2)[:, 1:, 0],
        "lm_token_losses": losses["lm_token_losses"].numpy().reshape(n_seq, seq - 1),
        "lm_losses": losses["lm_losses"].numpy().reshape(n_seq),
        "lm_loss_mean": tf.reduce_mean(losses["lm_losses"]).numpy(),
        "clf_pool_idx": out["clf_pool_idx"].numpy().reshape(n_seq),
        "clf_gather_idx": np.arange(n_seq) * n_ctx + out["clf_pool_idx"].numpy().reshape(n_seq),
        "clf_h": out["clf_h"].numpy().reshape(n_seq, -1),
    }
    if "clf_logits" in ref.files:
        ours["clf_logits"] = out["clf_logits"].numpy()
        ours["clf_losses"] = losses["clf_losses"].numpy()
        ours["clf_loss_mean"] = tf.reduce_mean(losses["clf_losses"]).numpy()
        ours["train_loss"] = losses["train_loss"].numpy()
    missing = sorted(set(ref.files) - set(ours))
    assert not missing, f"reference keys not compared: {missing}"
    diffs = {}
    for key in ref.files:
        expected, actual = ref[key], np.asarray(ours[key])
        assert actual.shape == expected.shape, (key, actual.shape, expected.shape)
        if expected.dtype.kind == "i":
            np.testing.assert_array_equal(actual, expected, err_msg=key)
            continue
        atol = (ATOL_PROBS if key == "attn_probs" else ATOL_LOGITS if "logits" in key
                else ATOL_HIDDEN)
        diffs[key] = float(np.max(np.abs(actual - expected)))
        np.testing.assert_allclose(actual, expected, rtol=0, atol=atol, err_msg=key)
    return diffs


@pytest.mark.gpt_fixtures
@pytest.mark.parametrize("folder", ["forward_roc", "forward_single"])
def test_forward_eval_matches_original(gpt_fixtures, gpt_fixture_json, folder):
    model = build_fixture_model(gpt_fixtures, gpt_fixture_json)
    inputs = load_inputs(gpt_fixtures / folder)
    ref = np.load(gpt_fixtures / folder / "reference_outputs.npz")
    out, losses = _run(model, inputs["X"], inputs["M"], inputs.get("Y"), training=False)
    diffs = _compare(out, losses, ref, inputs["X"], gpt_fixture_json["n_ctx"])
    print(folder, json.dumps(diffs))


@pytest.mark.gpt_fixtures
def test_forward_train_mode_with_recorded_dropout_masks(gpt_fixtures, gpt_fixture_json):
    from bert_tf.gpt.dropout import injected_keep_masks
    folder = gpt_fixtures / "forward_train_dropout"
    manifest = json.loads((folder / "manifest.json").read_text())
    model = build_fixture_model(gpt_fixtures, gpt_fixture_json, pdrop=train_mode_pdrop(manifest))
    inputs = load_inputs(folder)
    ref = np.load(folder / "reference_outputs.npz")
    masks = dict(np.load(folder / "dropout_keep_masks.npz"))
    assert set(masks) == set(model.dropout_layers()), "a dropout of the original has no twin"
    with injected_keep_masks(model.dropout_layers(), masks):
        out, losses = _run(model, inputs["X"], inputs["M"], inputs["Y"], training=True)
    diffs = _compare(out, losses, ref, inputs["X"], gpt_fixture_json["n_ctx"])
    # The fine-tuning loss applies the LM head at the mask's positions only, on the same
    # dropped table (`lm_table`): the original's per-sequence LM losses all the same.
    from bert_tf.gpt.losses import masked_lm_losses
    masked = masked_lm_losses(out["hidden_states"], out["lm_table"], inputs["X"][..., 0],
                              inputs["M"]).numpy()
    np.testing.assert_allclose(masked.reshape(-1), ref["lm_losses"], rtol=0, atol=ATOL_HIDDEN)
    print("forward_train_dropout", json.dumps(diffs))
    # The hook is gone after the block: the same call now draws its own masks.
    out2, _ = _run(model, inputs["X"], inputs["M"], inputs["Y"], training=True)
    assert not np.allclose(out2["hidden_states"], out["hidden_states"], atol=1e-3)


@pytest.mark.gpt_fixtures
def test_user_api_generates_the_original_positions(gpt_fixtures, gpt_fixture_json):
    """token_ids alone (positions generated) gives the outputs of the original X layout."""
    from bert_tf.gpt.model import original_inputs
    model = build_fixture_model(gpt_fixtures, gpt_fixture_json)
    X = load_inputs(gpt_fixtures / "forward_roc")["X"]
    a = model(original_inputs(X))
    b = model({"token_ids": X[..., 0]})
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    # Single sequences [B, S] without a choice axis: one score per sequence.
    single = model({"token_ids": X[:, 0, :, 0]})
    assert single["clf_logits"].shape == (X.shape[0],)
    np.testing.assert_allclose(single["clf_logits"], a["clf_logits"][:, 0], atol=1e-6)


def test_sequence_longer_than_n_ctx_is_a_user_error():
    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.model import GptModel
    model = GptModel(GptConfig(n_vocab=50, n_ctx=8, n_embd=16, n_head=2, n_layer=1))
    with pytest.raises(UserInputError, match="sequence length 9 exceeds n_ctx 8"):
        model({"token_ids": np.zeros([2, 9], np.int32)})
    with pytest.raises(UserInputError, match="expected a dict with 'token_ids'"):
        model(np.zeros([2, 8], np.int32))


def test_keras_file_round_trip_gives_identical_outputs(tmp_path):
    import keras
    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.model import GptModel
    config = GptConfig(n_vocab=50, n_special=3, n_ctx=8, n_embd=16, n_head=2, n_layer=2,
                       afn="swish", clf_pdrop=0.2)
    model = GptModel(config, clf_token=51)
    rng = np.random.default_rng(0)
    for _, v in model.original_variables():  # move off the init so a lost weight shows
        v.assign(rng.normal(0, 0.3, v.shape).astype(np.float32))
    tokens = rng.integers(0, 53, size=[3, 2, 8]).astype(np.int32)
    tokens[:, :, 5] = 51
    before = model({"token_ids": tokens})
    path = tmp_path / "gpt.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, GptModel) and loaded.config == config and loaded.clf_token == 51
    after = loaded({"token_ids": tokens})
    for key in before:
        np.testing.assert_array_equal(before[key], after[key], err_msg=key)
    assert [n for n, _ in loaded.original_variables()] == [n for n, _ in model.original_variables()]


@pytest.mark.gpt_fixtures
def test_fixture_files_are_intact(gpt_fixtures):
    """MANIFEST.sha256 of the fixture set: the files these tests read are the published ones."""
    import hashlib
    manifest = gpt_fixtures / "MANIFEST.sha256"
    if not manifest.exists():
        pytest.skip(f"{manifest} is absent")
    for line in manifest.read_text().splitlines():
        if not line.strip():
            continue
        digest, name = line.split(maxsplit=1)
        if name == "README.md":
            continue
        data = (gpt_fixtures / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, name


def test_random_dropout_masks_follow_the_original_shapes():
    """Without injected masks: the clf mask is shared by an example's choices, the table mask
    is applied to the table (a token id gets the same pattern at every occurrence)."""
    import keras
    from bert_tf.gpt.heads import GptClassifierHead
    from bert_tf.gpt.embeddings import GptEmbedding
    from bert_tf.gpt.config import GptConfig
    keras.utils.set_random_seed(3)
    head = GptClassifierHead(n_embd=32, clf_token=7, clf_pdrop=0.5)
    head.build()
    head.w.assign(np.random.default_rng(0).normal(size=(32, 1)).astype(np.float32))
    h = np.broadcast_to(np.random.default_rng(1).normal(size=(4, 1, 5, 32)),
                        (4, 3, 5, 32)).astype(np.float32)  # 3 identical choices
    tokens = np.full([4, 3, 5], 7, np.int32)
    logits, _, _ = head(h, tokens, training=True)
    eval_logits, _, _ = head(h, tokens, training=False)
    # The choices' rows are equal before the head's matmul, so with one mask their logits differ
    # at most by the float32 rounding of a 32-term dot product (0 on an Intel AVX-512 host;
    # whether a GEMM kernel treats equal rows alike is the CPU's choice), bounded by
    # 32 · 2^-24 · Σ|h·w| / (1 - rate); a mask per choice moves them by O(1).
    rounding = 32 * 2.0 ** -24 * np.abs(h * head.w.numpy()[:, 0]).sum(-1).max() / 0.5
    np.testing.assert_allclose(logits, np.repeat(logits[:, :1], 3, axis=1), atol=rounding,
                               rtol=0)
    assert not np.allclose(logits, eval_logits)
    embedding = GptEmbedding(GptConfig(n_vocab=10, n_special=3, n_ctx=6, n_embd=16, n_head=2,
                                       embd_pdrop=0.5))
    embedding.build()
    ids = np.array([[4, 4, 4, 4, 4, 4]], np.int32)
    same_position = np.full([1, 6], 13, np.int32)
    emb, table = embedding(ids, same_position, training=True)
    np.testing.assert_array_equal(emb[0, 0], emb[0, 5])  # same token, same position, same mask
    expected = table.numpy()[4] + table.numpy()[13]
    np.testing.assert_array_equal(emb[0], np.broadcast_to(expected, emb[0].shape))
    assert (table.numpy() == 0).mean() > 0.3  # the table itself was dropped


def test_traced_model_with_unknown_sequence_length():
    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.model import GptModel
    model = GptModel(GptConfig(n_vocab=50, n_ctx=8, n_embd=16, n_head=2, n_layer=1))
    run = tf.function(lambda t: model({"token_ids": t})["clf_logits"],
                      input_signature=[tf.TensorSpec([None, None], tf.int32)])
    assert run(np.zeros([2, 5], np.int32)).shape == (2,)
    with pytest.raises(tf.errors.InvalidArgumentError, match="sequence longer than n_ctx"):
        run(np.zeros([2, 9], np.int32))


def test_mixed_bfloat16_policy_trains_with_float32_losses():
    import keras
    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.model import GptModel
    from bert_tf.training.openai_adam import OpenAIAdam
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = GptModel(GptConfig(n_vocab=50, n_ctx=8, n_embd=16, n_head=2, n_layer=1))
        tokens = np.random.default_rng(0).integers(0, 53, size=(2, 2, 8)).astype(np.int32)
        optimizer = OpenAIAdam(learning_rate=1e-3, t_total=10, warmup=0.05)
        variables = [v for _, v in model.original_variables()]
        before = [v.numpy().copy() for v in variables]
        for _ in range(2):
            with tf.GradientTape() as tape:
                out = model({"token_ids": tokens}, training=True)
                losses = model.compute_losses(out, tokens, np.ones([2, 2, 8], np.float32),
                                              np.array([0, 1]))
            optimizer.apply_gradients(zip(tape.gradient(losses["train_loss"], variables),
                                          variables))
        assert out["hidden_states"].dtype == tf.bfloat16
        assert losses["train_loss"].dtype == tf.float32 and np.isfinite(losses["train_loss"])
        assert all(v.dtype == "float32" for v in variables)
        assert any(not np.array_equal(b, v.numpy()) for b, v in zip(before, variables))
    finally:
        keras.mixed_precision.set_global_policy(previous)
