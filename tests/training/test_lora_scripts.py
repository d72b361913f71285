"""LoRA from the fine-tuning loop and scripts (`--lora_rank`, `--lora_alpha`, `--lora_targets`,
`--lora_dropout`; bert_tf.training.lora_finetuning): bad settings name the flag; adapter dropout
touches the adapter path only, while training; a LoRA run trains only the adapters and the head,
its checkpoint holds the adapters (re-created on load), its lora_weights.npz reloads to the same
outputs; a run stopped between steps resumes bit-identically; GPT-1's classifier gets adapters
too. Long: tools/run_classifier.py on the original release's fixture checkpoint with
--lora_rank, SIGKILLed between steps and resumed (= the unkilled run, bit for bit), then
tools/export_savedmodel.py of that run (adapters merged: no LoRA variables or ops, served
logits = the unmerged model's within 1e-5)."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints import read_checkpoint
from bert_tf.errors import UserInputError
from bert_tf.modeling import BertClassifier, BertConfig
from bert_tf.modeling import lora
from bert_tf.training import finetuning
from bert_tf.training.finetuning import FinetuneOptions, load_checkpoint, train_model
from bert_tf.training.lora_finetuning import LORA_WEIGHTS_FILE, apply_lora_options

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
SEQ = 8
MERGE_ATOL = 1e-5  # the bound for merged vs unmerged (float32 rounding of W + s·A@B)


def _config(dropout: float = 0.0) -> BertConfig:
    return BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=16, type_vocab_size=2,
                      hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)


def _classifier(dropout: float = 0.0, seed: int = 1, head_dropout: float = 0.1
                ) -> BertClassifier:
    keras.utils.set_random_seed(seed)
    return BertClassifier(_config(dropout), num_labels=2,
                          dropout_rate=head_dropout).build_from_config_shapes()


def _arrays(n: int = 24) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(10, 50, size=(n, SEQ)).astype(np.int32)
    labels = (np.arange(n) % 2).astype(np.int32)
    ids[labels == 1, 3] = 7
    mask = np.ones_like(ids)
    mask[::3, 6:] = 0
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids),
            "label_ids": labels}


def _loss(outputs, batch):
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        batch["label_ids"], outputs["logits"], from_logits=True))


def _options(out, steps=4, **lora_kwargs) -> FinetuneOptions:
    return FinetuneOptions(output_dir=str(out), learning_rate=1e-2, num_train_steps=steps,
                           num_warmup_steps=1, train_batch_size=4, save_checkpoints_steps=2,
                           progress=False, plot_curves=False, **lora_kwargs)


def _inputs(arrays):
    return {k: arrays[k][:6] for k in finetuning.ENCODER_INPUT_KEYS}


@pytest.mark.parametrize("kwargs, message", [
    ({"lora_rank": -1}, "--lora_rank=-1: expected an integer >= 0"),
    ({"lora_rank": 2, "lora_alpha": 0.0}, "--lora_alpha=0.0: expected a number > 0"),
    ({"lora_rank": 2, "lora_dropout": 1.0}, "--lora_dropout=1.0: expected a probability in"),
    ({"lora_rank": 2, "lora_dropout": -0.1}, "--lora_dropout=-0.1: expected a probability in"),
    ({"lora_rank": 2, "lora_targets": []}, "--lora_targets is empty"),
])
def test_bad_settings_name_the_flag(tmp_path, kwargs, message):
    with pytest.raises(UserInputError) as e:
        _options(tmp_path, **kwargs)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_every_fine_tuning_script_has_the_flags_and_passes_them_on():
    from bert_tf.cli.flags_from_options import flag_specs
    from bert_tf.tasks.classifier import ClassifierRunOptions
    from bert_tf.tasks.gpt_classifier import GptClassifierRunOptions
    from bert_tf.tasks.multiple_choice import SwagRunOptions
    from bert_tf.tasks.ner.run import NerRunOptions
    from bert_tf.tasks.squad.run import SquadRunOptions

    for options_class in (ClassifierRunOptions, NerRunOptions, SquadRunOptions, SwagRunOptions,
                          GptClassifierRunOptions):
        specs = {spec.name: spec.default for spec in flag_specs(options_class)}
        assert specs["lora_rank"] == 0 and specs["lora_alpha"] is None, options_class
        assert specs["lora_dropout"] == 0.0, options_class
        assert specs["lora_targets"] == (["c_attn"] if options_class is GptClassifierRunOptions
                                         else ["query", "value"]), options_class
    opts = ClassifierRunOptions(bert_config_file="c", vocab_file="v", output_dir="o",
                                task_name="mrpc", lora_rank=3, lora_alpha=6.0,
                                lora_targets=["key"], lora_dropout=0.2)
    loop = opts.finetune_options(10, 1)  # the method every BERT task's options inherit
    assert (loop.lora_rank, loop.lora_alpha, loop.lora_targets, loop.lora_dropout) == (
        3, 6.0, ["key"], 0.2)


@pytest.mark.parametrize("factory", ["span", "token", "choice"])
def test_the_task_heads_stay_trainable(tmp_path, factory):
    from bert_tf.modeling import BertMultipleChoice, BertSpanLabeler, BertTokenClassifier

    keras.utils.set_random_seed(1)
    model = {"span": lambda: BertSpanLabeler(_config()),
             "token": lambda: BertTokenClassifier(_config(), num_labels=3),
             "choice": lambda: BertMultipleChoice(_config(), num_choices=2)}[factory]()
    model.build_from_config_shapes()
    head = {id(v) for v in model.weights} - {id(v) for v in model.encoder.weights}
    apply_lora_options(model, _options(tmp_path, lora_rank=2))
    trainable = {id(v) for v in model.trainable_variables}
    adapters = {id(v) for layer in lora.lora_layers(model).values()
                for v in (layer.lora_kernel_a, layer.lora_kernel_b)}
    assert head and trainable == adapters | head


def test_a_target_matching_no_layer_names_the_flag(tmp_path):
    with pytest.raises(UserInputError) as e:
        apply_lora_options(_classifier(), _options(tmp_path, lora_rank=2,
                                                   lora_targets=["query", "qurey"]))
    assert str(e.value).startswith("--lora_targets / --lora_dropout: LoRA target 'qurey' "
                                   "matches no Dense")
    assert "\n" not in str(e.value)


def test_adapter_dropout_acts_on_the_adapter_path_only_while_training():
    """Dropout 0.5 on the adapters' input: at inference the adapted model is the one-matmul
    model; while training, with B = 0 (no adapter contribution) it equals inference (the base
    path is not dropped), with B != 0 it differs (the adapter path is)."""
    model = _classifier(head_dropout=0.0)  # no other dropout
    base = lora.enable_lora(model, rank=2, targets="query,value,output_dense", dropout=0.5)
    assert all(getattr(layer, "lora_dropout", None) is not None
               for layer in lora.lora_layers(model).values()) and len(base) == 6
    x = _inputs(_arrays())
    np.testing.assert_allclose(model(x, training=True)["logits"],
                               model(x, training=False)["logits"], atol=1e-6, rtol=0)
    for layer in lora.lora_layers(model).values():
        layer.lora_kernel_b.assign(tf.fill(layer.lora_kernel_b.shape, 0.3))
    inference = model(x, training=False)["logits"].numpy()
    plain = _classifier(head_dropout=0.0)
    lora.enable_lora(plain, rank=2, targets="query,value,output_dense")
    plain.set_weights(model.get_weights())
    np.testing.assert_allclose(plain(x, training=False)["logits"], inference, atol=1e-6, rtol=0)
    # (the head's logits are small at initialisation: 10x the 1e-6 of the equalities above)
    assert np.abs(model(x, training=True)["logits"].numpy() - inference).max() > 1e-5


def test_lora_run_checkpoint_adapter_file_and_reload(tmp_path, capsys):
    arrays = _arrays()
    model = _classifier()
    finetuning.init_model(model, None)
    init = {n: np.array(v) for n, v in finetuning.checkpoint_variable_map(model).items()}
    result = train_model(model, arrays, _loss, _options(tmp_path, steps=2, lora_rank=2,
                                                        lora_alpha=4.0))
    h, r, layers = 16, 2, 4
    adapters, head = layers * (h * r + r * h), 2 * h + 2
    assert f"{adapters + head:,} trainable parameters ({adapters:,} in the adapters, " \
           f"{head:,} in the task head)" in capsys.readouterr().out
    assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == adapters + head
    saved = read_checkpoint(result["checkpoint"])
    prefix = "bert/encoder/layer_0/attention/self/query"
    assert saved[f"{prefix}/lora_a"].shape == (h, r) and float(saved[f"{prefix}/lora_alpha"]) == 4
    assert f"{prefix}/lora_b/adam_m" in saved and f"{prefix}/kernel/adam_m" not in saved
    for name, value in init.items():  # base frozen, the head trained
        if name.startswith("bert/"):
            np.testing.assert_array_equal(saved[name], value, err_msg=name)
    assert not np.array_equal(saved["output_weights"], init["output_weights"])
    x = _inputs(arrays)
    trained = model(x, training=False)["logits"].numpy()
    # The run's checkpoint re-creates the adapters in a fresh model.
    fresh = _classifier(seed=7)
    load_checkpoint(fresh, result["checkpoint"])
    assert sorted(lora.lora_layers(fresh)) == sorted(lora.lora_layers(model))
    np.testing.assert_array_equal(fresh(x, training=False)["logits"], trained)
    # The small adapters file, on the base weights, gives the same outputs.
    assert result["lora_weights"] == str(tmp_path / LORA_WEIGHTS_FILE)
    other = _classifier(seed=1)
    lora.load_lora_weights(other, result["lora_weights"])
    np.testing.assert_array_equal(other(x, training=False)["logits"], trained)
    # Merged (as the export does): equal within 1e-5, no adapters left.
    lora.merge_lora(fresh)
    assert not any("lora" in v.path for v in fresh.weights)
    np.testing.assert_allclose(fresh(x, training=False)["logits"], trained, atol=MERGE_ATOL,
                               rtol=0)


def test_rank_0_is_the_original_run(tmp_path):
    """--lora_rank=0 (the default) adds nothing: no adapters, every weight trainable, the
    training state (checkpoint names) exactly the model's original names."""
    model = _classifier()
    assert apply_lora_options(model, _options(tmp_path)) == []
    assert not lora.lora_layers(model)
    assert all(v.trainable for v in model.weights if v.dtype == "float32")
    names = finetuning.training_state_map(model)
    assert set(names) == set(finetuning.checkpoint_variable_map(model)) | {
        n for n in names if n.startswith(finetuning.RANDOM_STATE_SCOPE)}
    assert not any("lora" in n for n in names)


def test_resume_with_other_targets_names_the_flag_the_checkpoint_and_both_lists(tmp_path):
    """Options whose --lora_targets differ from the adapters of the checkpoint in --output_dir
    (the one train_model resumes from) are refused in one line naming the flag, the checkpoint
    and both target lists: adapters made from the flags (train_model's resume path) and
    adapters re-created from the checkpoint first (load_checkpoint, as the scripts' prediction
    does). Patterns selecting the same layers are the same run; another rank is refused."""
    first = train_model(_classifier(), _arrays(), _loss,
                        _options(tmp_path, steps=2, lora_rank=2))
    prefix = first["checkpoint"]
    with pytest.raises(UserInputError) as e:
        apply_lora_options(_classifier(), _options(tmp_path, lora_rank=2,
                                                   lora_targets=["query", "key", "value"]))
    message = str(e.value)
    assert message.startswith(f"--lora_targets=query,key,value: the checkpoint {prefix} "
                              "adapts query,value (4 layers), these targets adapt "
                              "key,query,value (6 layers; e.g. "), message
    assert message.endswith("pass that run's --lora_targets") and "\n" not in message
    model = _classifier()  # adapters re-created from the checkpoint, then the flags
    load_checkpoint(model, prefix)
    with pytest.raises(UserInputError, match=r"^--lora_targets=value: the checkpoint "
                       rf"{re.escape(prefix)} adapts query,value \(4 layers\), these targets "
                       r"adapt value \(2 layers"):
        apply_lora_options(model, _options(tmp_path, lora_rank=2, lora_targets=["value"]))
    assert len(apply_lora_options(model, _options(tmp_path, lora_rank=2, lora_targets=[
        "*/query", "*/value"]))) == 4
    assert len(apply_lora_options(_classifier(), _options(
        tmp_path, lora_rank=2, lora_targets=["*/query", "value"]))) == 4
    with pytest.raises(UserInputError, match=r"^--lora_rank=4 --lora_alpha=4: the checkpoint "
                       rf"{re.escape(prefix)} adapts bert/encoder/layer_0/attention/self/query "
                       "with rank 2, alpha 2"):
        apply_lora_options(_classifier(), _options(tmp_path, lora_rank=4))


@pytest.mark.long  # four short runs: ~40 s on a loaded 2-core machine
def test_train_model_resume_checks_the_checkpoints_adapters(tmp_path):
    """train_model itself: resuming with other targets is refused before any step; the same
    flags resume; --lora_rank on a run whose checkpoint has no adapters is one line."""
    arrays = _arrays()
    first = train_model(_classifier(), arrays, _loss, _options(tmp_path, steps=2, lora_rank=2))
    with pytest.raises(UserInputError, match=r"^--lora_targets=query,key,value: the "
                       rf"checkpoint {re.escape(first['checkpoint'])} adapts query,value"):
        train_model(_classifier(), arrays, _loss, _options(
            tmp_path, lora_rank=2, lora_targets=["query", "key", "value"]))
    again = train_model(_classifier(), arrays, _loss, _options(tmp_path, steps=3, lora_rank=2))
    assert again["start_step"] == 2 and again["global_step"] == 3
    plain = tmp_path / "plain"
    train_model(_classifier(), arrays, _loss, _options(plain, steps=2))
    with pytest.raises(UserInputError, match=r"^--lora_rank=2: the checkpoint .* has no LoRA "
                       "adapters"):
        train_model(_classifier(), arrays, _loss, _options(plain, steps=3, lora_rank=2))


def test_adapters_take_the_loops_weight_decay_unless_excluded(tmp_path):
    """The fine-tuning loop's optimizer (the original AdamWeightDecay, rate 0.01, names from
    the run's checkpoint names) decays the adapter matrices as it decays every other matrix
    (the LoRA paper's scripts and HF Trainer do the same); biases and LayerNorm weights are
    exempt; `LORA_ADAPTER_WEIGHTS` added to the exclusions exempts the adapters."""
    from bert_tf.training.optimization import (DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
                                               LORA_ADAPTER_WEIGHTS, AdamWeightDecay,
                                               create_optimizer)

    model = _classifier()
    apply_lora_options(model, _options(tmp_path, lora_rank=2,
                                       lora_targets=["query", "value", "pooler"]))
    names = {v.path: n for n, v in finetuning.lora_variable_map(
        model, finetuning.checkpoint_variable_map).items()}  # as train_model names them
    opt = create_optimizer(1e-3, 10, 1, variable_names=names)
    variables = model.trainable_variables
    decayed = {opt.variable_name(v) for v in variables if opt.uses_weight_decay(v)}
    adapters = {n for n in map(opt.variable_name, variables) if n.endswith(("/lora_a",
                                                                            "/lora_b"))}
    assert len(adapters) == 2 * 5  # query, value of 2 blocks and the pooler, A and B each
    assert decayed == adapters | {"output_weights"}, sorted(decayed)
    exempt = create_optimizer(1e-3, 10, 1, variable_names=names, exclude_from_weight_decay=(
        *DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY, LORA_ADAPTER_WEIGHTS))
    assert {exempt.variable_name(v) for v in variables
            if exempt.uses_weight_decay(v)} == {"output_weights"}
    # Keras paths (no checkpoint names given) match the same pattern.
    keras_names = AdamWeightDecay(exclude_from_weight_decay=(
        *DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY, LORA_ADAPTER_WEIGHTS))
    assert not any(keras_names.uses_weight_decay(v) for v in variables
                   if "lora_kernel" in v.path)
    assert all(AdamWeightDecay().uses_weight_decay(v) for v in variables
               if "lora_kernel" in v.path)
    # One update: an adapter with zero gradient shrinks by lr * 0.01 (decoupled decay).
    layer = lora.lora_layers(model)[sorted(lora.lora_layers(model))[0]]
    before = np.array(layer.lora_kernel_a)
    opt = AdamWeightDecay(learning_rate=0.5, weight_decay_rate=0.01, variable_names=names)
    opt.apply_gradients([(tf.zeros_like(layer.lora_kernel_a), layer.lora_kernel_a)])
    np.testing.assert_allclose(np.array(layer.lora_kernel_a), before * (1 - 0.5 * 0.01),
                               rtol=1e-6)


@pytest.mark.long  # ~60 s on a loaded 2-core machine
def test_stopped_lora_run_resumes_bit_identical(tmp_path):
    """Model and adapter dropout 0.1: a run stopped after its step-2 checkpoint (a NaN loss at
    step 3) and run again continues as the uninterrupted run, bit for bit (adapters, their
    Adam slots, the adapter-dropout streams, head, losses)."""
    arrays = _arrays()
    lora_kwargs = {"lora_rank": 2, "lora_dropout": 0.1,
                   "lora_targets": ["query", "value", "intermediate_dense"]}
    full = train_model(_classifier(0.1), arrays, _loss,
                       _options(tmp_path / "full", **lora_kwargs))
    calls = tf.Variable(0)

    def fails_at_step_3(outputs, batch):
        calls.assign_add(1)
        poison = tf.where(tf.equal(calls, 3), np.float32(np.nan), np.float32(1.0))
        return _loss(outputs, batch) * poison

    out = tmp_path / "resumed"
    with pytest.raises(FloatingPointError, match="at step 3"):
        train_model(_classifier(0.1), arrays, fails_at_step_3, _options(out, **lora_kwargs))
    again = train_model(_classifier(0.1), arrays, _loss, _options(out, **lora_kwargs))
    assert again["start_step"] == 2
    assert [r["loss"] for r in again["history"]] == [r["loss"] for r in full["history"][2:]]
    a, b = read_checkpoint(full["checkpoint"]), read_checkpoint(again["checkpoint"])
    assert sorted(a) == sorted(b)
    assert any("lora_dropout" in n for n in a), "the adapter-dropout streams are checkpointed"
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    # Other LoRA settings than the checkpoint's are refused, naming the flags.
    with pytest.raises(UserInputError, match="--lora_rank=4 --lora_alpha=4: the checkpoint"):
        model = _classifier(0.1)
        load_checkpoint(model, again["checkpoint"])
        apply_lora_options(model, _options(out, lora_rank=4))


@pytest.mark.long  # ~15-25 s; the GPT-1 script test below covers training and export
def test_gpt_classifier_adapters_train_reload_and_merge(tmp_path):
    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.task_model import GptClassifier

    def gpt():
        keras.utils.set_random_seed(5)
        config = GptConfig(n_vocab=40, n_special=3, n_ctx=SEQ, n_embd=16, n_head=2, n_layer=2)
        return GptClassifier(config, task="classification", num_classes=2,
                             name="gpt_classifier")

    rng = np.random.default_rng(1)
    arrays = {"token_ids": rng.integers(0, 40, [16, SEQ]).astype(np.int32),
              "label_ids": (np.arange(16) % 2).astype(np.int32)}
    model = gpt()
    model({"token_ids": arrays["token_ids"][:2]})
    result = train_model(model, arrays, _loss, _options(tmp_path, steps=2, lora_rank=2,
                                                        lora_targets=["c_attn"]),
                         input_keys=("token_ids",), length_key=None)
    assert sorted(lora.lora_layers(model)) == ["transformer/h0/attn/c_attn",
                                               "transformer/h1/attn/c_attn"]
    x = {"token_ids": arrays["token_ids"][:4]}
    trained = model(x, training=False)["logits"].numpy()
    fresh = gpt()
    fresh(x)
    load_checkpoint(fresh, result["checkpoint"])
    np.testing.assert_array_equal(fresh(x, training=False)["logits"], trained)
    lora.merge_lora(fresh)
    np.testing.assert_allclose(fresh(x, training=False)["logits"], trained, atol=MERGE_ATOL,
                               rtol=0)


# ---------------------------------------------------------------------------------------------
# The scripts (real processes) on the original release's fixture checkpoint
# ---------------------------------------------------------------------------------------------
NUM_STEPS, SAVE_EVERY = 8, 2


def _mrpc_subset(shared_data, folder: pathlib.Path) -> pathlib.Path:
    for split, rows in (("train", 32), ("dev", 8)):
        lines = (shared_data / "glue" / "MRPC" / f"{split}.tsv").read_text(
            encoding="utf-8-sig").splitlines(keepends=True)
        (folder / f"{split}.tsv").write_text("".join(lines[:rows + 1]), encoding="utf-8")
    return folder


def _classifier_command(fixtures, data_dir, output_dir) -> list[str]:
    ckpt = fixtures / "checkpoint"
    return [sys.executable, str(PROJECT_ROOT / "tools" / "run_classifier.py"),
            "--task_name=MRPC", "--do_train=true", f"--data_dir={data_dir}",
            f"--vocab_file={fixtures / 'vocab_uncased.txt'}",
            f"--bert_config_file={ckpt / 'bert_config.json'}",
            f"--init_checkpoint={ckpt / 'bert_model.ckpt'}", "--max_seq_length=32",
            "--train_batch_size=8", "--learning_rate=1e-3", "--num_train_epochs=2",
            f"--save_checkpoints_steps={SAVE_EVERY}", "--plot_curves=false",
            "--lora_rank=4", "--lora_alpha=8", "--lora_dropout=0.1",
            "--lora_targets=query,value,output_dense", f"--output_dir={output_dir}"]


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
                PYTHONPATH=str(PROJECT_ROOT))


@pytest.mark.long
def test_classifier_script_killed_between_steps_resumes_and_exports_merged(
        original_fixtures, shared_data, tmp_path):
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from test_finetuning_drills import _kill_when, _latest_step  # the drills' kill helper

    data = _mrpc_subset(shared_data, tmp_path)
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    proc = subprocess.run(_classifier_command(original_fixtures, data, full_dir),
                          capture_output=True, text=True, cwd=PROJECT_ROOT, env=_env(),
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trainable parameters" in proc.stdout
    assert (full_dir / LORA_WEIGHTS_FILE).exists()
    # Killed once the step-4 checkpoint is written (between steps), then run again.
    cmd = _classifier_command(original_fixtures, data, killed_dir)
    killed = _kill_when(cmd, tmp_path / "killed.log",
                        lambda log, _: _latest_step(killed_dir) >= 2 * SAVE_EVERY)
    assert killed and _latest_step(killed_dir) < NUM_STEPS
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=PROJECT_ROOT, env=_env(),
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a = read_checkpoint(full_dir / f"model.ckpt-{NUM_STEPS}")
    b = read_checkpoint(killed_dir / f"model.ckpt-{NUM_STEPS}")
    assert sorted(a) == sorted(b)
    assert "bert/encoder/layer_1/output/dense/lora_b/adam_v" in a
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)

    # The export of the run merges the adapters: no LoRA variables or ops, the same logits.
    export = tmp_path / "export"
    ckpt = original_fixtures / "checkpoint"
    proc = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "tools" / "export_savedmodel.py"),
         "--model_type=classifier", f"--bert_config_file={ckpt / 'bert_config.json'}",
         f"--vocab_file={original_fixtures / 'vocab_uncased.txt'}", "--num_labels=2",
         f"--init_checkpoint={full_dir / f'model.ckpt-{NUM_STEPS}'}", "--seq_length=32",
         f"--export_dir={export}"], capture_output=True, text=True, cwd=PROJECT_ROOT,
        env=_env(), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import tensorflow_text  # noqa: F401 (the in-graph tokenizer's ops)

    served = tf.saved_model.load(str(export / "1"))
    saved_variables = tf.train.list_variables(str(export / "1" / "variables" / "variables"))
    assert saved_variables and not [n for n, _ in saved_variables if "lora" in n.lower()]
    # No adapter variable, op or function in the graph (the graph also holds the vocabulary,
    # whose words may contain "lora": exploration, flora).
    graph_text = (export / "1" / "saved_model.pb").read_bytes()
    assert not re.search(rb"lora_(kernel|a\b|b\b|alpha|dropout)", graph_text)
    model = BertClassifier(BertConfig.from_json_file(str(ckpt / "bert_config.json")),
                           num_labels=2)
    load_checkpoint(model, str(full_dir / f"model.ckpt-{NUM_STEPS}"))
    assert lora.lora_layers(model)  # unmerged
    rng = np.random.default_rng(3)
    ids = rng.integers(1000, 30000, [4, 32]).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 20:] = 0
    x = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)}
    expected = model(x, training=False)["logits"].numpy()
    fn = served.signatures["serving_ids"]
    got = fn(**{k: tf.constant(v) for k, v in x.items()
                if k in fn.structured_input_signature[1]})
    np.testing.assert_allclose(got["logits"].numpy(), expected, atol=MERGE_ATOL, rtol=0)


@pytest.mark.long
def test_gpt_classifier_script_with_lora_exports_merged(original_fixtures, tmp_path):
    """tools/run_gpt_classifier.py --lora_rank=2 on a tiny GPT-1 (the fixture vocabulary, own
    csv rows): only the c_attn adapters and the head train, the checkpoint and
    lora_weights.npz hold the adapters, and --export_dir serves the merged model (no LoRA
    variables) with test_results.tsv's probabilities (unmerged model) within 1e-5."""
    import csv

    from bert_tf.gpt.config import GptConfig

    vocab = original_fixtures / "vocab_uncased.txt"
    n_vocab = sum(1 for _ in open(vocab, encoding="utf-8"))
    config = tmp_path / "gpt_config.json"
    GptConfig(n_vocab=n_vocab, n_special=3, n_ctx=24, n_embd=32, n_head=2,
              n_layer=2).to_json_file(config)
    words = ["good", "bad", "film", "the", "was", "very", "not", "story", "great", "dull"]
    rng = np.random.default_rng(0)
    rows = [(" ".join(rng.choice(words, 6)), ["neg", "pos"][i % 2]) for i in range(40)]
    for name, part in (("train", rows[:32]), ("test", rows[32:])):
        with open(tmp_path / f"{name}.csv", "w", encoding="utf-8", newline="") as f:
            csv.writer(f).writerows([("text", "label"), *part])
    out, export = tmp_path / "out", tmp_path / "export"
    proc = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "tools" / "run_gpt_classifier.py"),
         "--task_name=csv", f"--train_file={tmp_path / 'train.csv'}",
         f"--test_file={tmp_path / 'test.csv'}", "--text_a_column=text", "--label_column=label",
         f"--gpt_config_file={config}", f"--vocab_file={vocab}", f"--output_dir={out}",
         f"--export_dir={export}", "--do_train", "--do_predict", "--max_seq_length=24",
         "--max_text_length=16", "--train_batch_size=8", "--num_train_epochs=1",
         "--learning_rate=1e-3", "--lora_rank=2", "--lora_alpha=4"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, env=_env(), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LoRA on 2 layers" in proc.stdout and "trainable parameters" in proc.stdout
    saved = read_checkpoint(finetuning.latest_checkpoint(str(out)))
    adapted = sorted(n for n in saved if n.endswith("/lora_a"))
    assert len(adapted) == 2 and all(n.endswith("/attn/c_attn/lora_a") for n in adapted)
    meta, arrays = lora.read_lora_file(str(out / LORA_WEIGHTS_FILE))
    assert len(meta["layers"]) == 2 and meta["head"]
    lines = (out / "test_results.tsv").read_text().splitlines()
    probs = np.array([[float(x) for x in line.split("\t")] for line in lines])
    import tensorflow_text  # noqa: F401 (the in-graph tokenizer's ops)

    served = tf.saved_model.load(str(export / "1"))
    saved_variables = tf.train.list_variables(str(export / "1" / "variables" / "variables"))
    assert saved_variables and not [n for n, _ in saved_variables if "lora" in n.lower()]
    got = served.signatures["serving_default"](text=tf.constant([t for t, _ in rows[32:]]))
    np.testing.assert_allclose(got["probabilities"].numpy(), probs, atol=MERGE_ATOL)


@pytest.mark.long
def test_adapter_dropout_with_recomputation_gives_the_same_gradients():
    """--recompute_activations re-runs each block in the backward pass: it puts the adapter
    dropout streams back too (they are the blocks' sublayers' seed generators), so the
    gradients equal the plain pass's (model dropout 0.1, adapter dropout 0.3)."""
    from bert_tf.modeling.recompute import enable_recompute, seed_generators_of

    def gradients(recompute: bool):
        model = _classifier(0.1)
        lora.enable_lora(model, rank=2, targets="query,value,output_dense", dropout=0.3)
        for layer in lora.lora_layers(model).values():
            layer.lora_kernel_b.assign(tf.fill(layer.lora_kernel_b.shape, 0.1))
        if recompute:
            enable_recompute(model)
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(model(_inputs(_arrays()), training=True)["logits"] ** 2)
        return [g.numpy() for g in tape.gradient(y, model.trainable_variables)], model

    plain, model = gradients(False)
    assert len(seed_generators_of(model.encoder.blocks[0])) == 6  # 3 model + 3 adapter streams
    recomputed, _ = gradients(True)
    for a, b in zip(plain, recomputed):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
