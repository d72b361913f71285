"""official_configs/: every model config loads as a BertConfig with the published sizes, and every
task flagfile parses and names only flags its script defines."""
from __future__ import annotations

import pathlib
import re

import pytest

from bert_tf.modeling import BertConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODELS = ROOT / "official_configs" / "models"
TASKS = ROOT / "official_configs" / "tasks"
NAME = re.compile(r"(uncased|cased)_L-(\d+)_H-(\d+)_A-(\d+)\.json")


# The published Chinese and multilingual releases: vocab sizes, and the extra keys their
# bert_config.json files carry (unused by BERT; kept and written back).
OTHER_RELEASES = {"chinese_L-12_H-768_A-12": 21128, "multi_cased_L-12_H-768_A-12": 119547,
                  "multilingual_L-12_H-768_A-12": 105879}
POOLER_EXTRAS = {"directionality": "bidi", "pooler_fc_size": 768, "pooler_num_attention_heads": 12,
                 "pooler_num_fc_layers": 3, "pooler_size_per_head": 128,
                 "pooler_type": "first_token_transform"}


def test_model_configs():
    files = sorted(MODELS.glob("*.json"))
    names = {f.name for f in files}
    for layers in (2, 4, 6, 8, 10, 12):  # the 24 miniatures of google-research/bert
        for hidden in (128, 256, 512, 768):
            assert f"uncased_L-{layers}_H-{hidden}_A-{hidden // 64}.json" in names
    for name in ("cased_L-12_H-768_A-12", "uncased_L-24_H-1024_A-16", "cased_L-24_H-1024_A-16",
                 *OTHER_RELEASES):
        assert f"{name}.json" in names
    assert len(files) == 30
    for f in files:
        if f.stem in OTHER_RELEASES:
            continue
        casing, layers, hidden, heads = NAME.fullmatch(f.name).groups()
        config = BertConfig.from_json_file(f)
        assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (
            int(layers), int(hidden), int(heads)), f.name
        assert config.intermediate_size == 4 * config.hidden_size
        assert config.vocab_size == (30522 if casing == "uncased" else 28996)
        assert (config.max_position_embeddings, config.type_vocab_size, config.hidden_act,
                config.hidden_dropout_prob, config.initializer_range) == (512, 2, "gelu", 0.1, 0.02)
        assert config.extra_fields == {}, f.name


@pytest.mark.parametrize("name", sorted(OTHER_RELEASES))
def test_chinese_and_multilingual_configs_keep_their_extra_keys(name, tmp_path):
    path = MODELS / f"{name}.json"
    with pytest.warns(UserWarning, match="pooler_type"):
        config = BertConfig.from_json_file(path)
    assert config.vocab_size == OTHER_RELEASES[name]
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.intermediate_size, config.type_vocab_size, config.hidden_act) == (
        12, 768, 12, 3072, 2, "gelu")
    assert config.extra_fields == POOLER_EXTRAS
    config.to_json_file(tmp_path / "bert_config.json")
    assert (tmp_path / "bert_config.json").read_text() == path.read_text()


SCRIPT_OF = {"squad_v1.1": "run_squad", "squad_v2.0": "run_squad", "ner": "run_ner",
             "swag": "run_swag"}


def _flags(path: pathlib.Path) -> dict[str, str]:
    flags = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"--([a-z_0-9]+)=(.+)", line)
        assert m, f"{path.name}:{n}: not a --flag=value line: {line!r}"
        flags[m.group(1)] = m.group(2)
    return flags


# The options dataclass whose fields are each script's flags (bert_tf/cli/<script>.py).
OPTIONS_OF = {"run_classifier": ("bert_tf.tasks.classifier", "ClassifierRunOptions"),
              "run_squad": ("bert_tf.tasks.squad", "SquadRunOptions"),
              "run_ner": ("bert_tf.tasks.ner", "NerRunOptions"),
              "run_swag": ("bert_tf.tasks.multiple_choice", "SwagRunOptions"),
              "run_gpt_classifier": ("bert_tf.tasks.gpt_classifier", "GptClassifierRunOptions")}


def _script_of(stem: str) -> str:
    if stem.startswith("gpt_"):  # GPT-1 fine-tuning flagfiles (gpt_mrpc.flags, ...)
        return "run_gpt_classifier"
    return SCRIPT_OF.get(stem, "run_classifier")


def _defined_flags(script: str) -> set[str]:
    """The flags the script defines: generated from its options dataclass, as the script does."""
    import importlib

    from absl import flags

    from bert_tf.cli.flags_from_options import define_flags

    module, name = OPTIONS_OF[script]
    try:
        options_class = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        pytest.skip(f"{module}.{name} (the flags of {script}.py) is not in this checkout")
    return set(define_flags(options_class, flags.FlagValues()))


@pytest.mark.parametrize("path", sorted(TASKS.glob("*.flags")), ids=lambda p: p.stem)
def test_task_flagfiles(path):
    flags = _flags(path)
    script = ROOT / "tools" / f"{_script_of(path.stem)}.py"
    if not script.exists():
        pytest.skip(f"{script.name} is not in this checkout")
    defined = _defined_flags(_script_of(path.stem))
    unknown = sorted(set(flags) - defined)
    assert not unknown, f"{path.name}: flags {unknown} are not defined by {script.name}"
    if path.stem.startswith("gpt_"):  # GPT-1 paper section 4.1
        assert (float(flags["learning_rate"]), float(flags["warmup_proportion"])) == (6.25e-5,
                                                                                   0.002)
        return
    assert float(flags["learning_rate"]) in (5e-5, 4e-5, 3e-5, 2e-5)
    assert float(flags["warmup_proportion"]) == 0.1
    if path.stem.startswith("squad"):
        assert (flags["max_seq_length"], flags["doc_stride"]) == ("384", "128")
    if SCRIPT_OF.get(path.stem) is None and path.stem not in ("imdb", "xnli"):
        assert (flags["train_batch_size"], flags["num_train_epochs"],
                flags["max_seq_length"]) == ("32", "3.0", "128")
    if SCRIPT_OF.get(path.stem) is None:
        from bert_tf.tasks import glue

        glue.canonical_task_name(flags["task_name"])


def test_flagfile_parses_with_absl():
    from absl import flags as absl_flags

    values = absl_flags.FlagValues()
    absl_flags.DEFINE_string("task_name", None, "", flag_values=values)
    absl_flags.DEFINE_bool("do_train", False, "", flag_values=values)
    absl_flags.DEFINE_bool("do_eval", False, "", flag_values=values)
    for name in ("max_seq_length", "train_batch_size", "eval_batch_size", "predict_batch_size"):
        absl_flags.DEFINE_integer(name, 0, "", flag_values=values)
    for name in ("num_train_epochs", "learning_rate", "warmup_proportion"):
        absl_flags.DEFINE_float(name, 0.0, "", flag_values=values)
    values(["prog", f"--flagfile={TASKS / 'mrpc.flags'}", "--learning_rate=3e-5"])
    assert values.task_name == "mrpc" and values.do_train and values.do_eval
    assert values.train_batch_size == 32 and values.learning_rate == 3e-5  # later flags win
