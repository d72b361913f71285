"""Every tool's flags come from its options dataclass (bert_tf.cli.flags_from_options): no flag is
defined by hand in tools/ or bert_tf/cli/, every field has a flag with help text and every flag a
field, the original scripts' flag names and defaults are all accepted, parsed values reach the
options object, and a user error is one line `error: ...` with exit status 1."""
from __future__ import annotations

import dataclasses
import importlib
import pathlib
import re
import subprocess
import sys

import pytest
from absl import flags

from bert_tf.cli.flags_from_options import (define_flags, flag_specs, options_from_flags,
                                            positional_field)
from bert_tf.errors import UserInputError

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
# The official SQuAD evaluation scripts' argparse command line, kept on purpose.
NOT_ABSL = {"evaluate_squad"}
# Every other tools/<name>.py must be a wrapper of bert_tf.cli.<name>, whose main() calls
# run_tool(<library function>, <options dataclass>, argv): the tools are found, not listed.
_RUN_TOOL = re.compile(r"run_tool\(\s*\w+,\s*(\w+)")
TOOLS = sorted(p.stem for p in (PROJECT_ROOT / "tools").glob("*.py") if p.stem not in NOT_ABSL)

_TPU = ["use_tpu", "tpu_name", "tpu_zone", "gcp_project", "master", "num_tpu_cores",
        "iterations_per_loop"]
# The flags of google-research/bert's scripts, with the defaults they document.
ORIGINAL_FLAGS = {
    "run_classifier": dict(
        data_dir=None, bert_config_file=None, task_name=None, vocab_file=None, output_dir=None,
        init_checkpoint=None, do_lower_case=True, max_seq_length=128, do_train=False,
        do_eval=False, do_predict=False, train_batch_size=32, eval_batch_size=8,
        predict_batch_size=8, learning_rate=5e-5, num_train_epochs=3.0, warmup_proportion=0.1,
        save_checkpoints_steps=1000, iterations_per_loop=1000, use_tpu=False, tpu_name=None,
        tpu_zone=None, gcp_project=None, master=None, num_tpu_cores=8),
    "run_squad": dict(
        bert_config_file=None, vocab_file=None, output_dir=None, train_file=None,
        predict_file=None, init_checkpoint=None, do_lower_case=True, max_seq_length=384,
        doc_stride=128, max_query_length=64, do_train=False, do_predict=False,
        train_batch_size=32, predict_batch_size=8, learning_rate=5e-5, num_train_epochs=3.0,
        warmup_proportion=0.1, save_checkpoints_steps=1000, iterations_per_loop=1000,
        n_best_size=20, max_answer_length=30, use_tpu=False, tpu_name=None, tpu_zone=None,
        gcp_project=None, master=None, num_tpu_cores=8, verbose_logging=False,
        version_2_with_negative=False, null_score_diff_threshold=0.0),
    "run_pretraining": dict(
        bert_config_file=None, input_file=None, output_dir=None, init_checkpoint=None,
        max_seq_length=128, max_predictions_per_seq=20, do_train=False, do_eval=False,
        train_batch_size=32, eval_batch_size=8, learning_rate=5e-5, num_train_steps=100000,
        num_warmup_steps=10000, save_checkpoints_steps=1000, iterations_per_loop=1000,
        max_eval_steps=100, use_tpu=False, tpu_name=None, tpu_zone=None, gcp_project=None,
        master=None, num_tpu_cores=8),
    "create_pretraining_data": dict(
        input_file=None, output_file=None, vocab_file=None, do_lower_case=True,
        do_whole_word_mask=False, max_seq_length=128, max_predictions_per_seq=20,
        random_seed=12345, dupe_factor=10, masked_lm_prob=0.15, short_seq_prob=0.1),
    "extract_features": dict(
        input_file=None, output_file=None, layers="-1,-2,-3,-4", bert_config_file=None,
        max_seq_length=128, init_checkpoint=None, vocab_file=None, do_lower_case=True,
        batch_size=32, use_tpu=False, master=None, num_tpu_cores=8,
        use_one_hot_embeddings=False),
}
# The fine-tuning scripts added here take the original's TPU flags too (issue 13).
for _tool in ("run_ner", "run_swag"):
    ORIGINAL_FLAGS[_tool] = {name: None for name in _TPU}


def _options_class(tool: str) -> type:
    module = importlib.import_module(f"bert_tf.cli.{tool}")
    match = _RUN_TOOL.search(pathlib.Path(module.__file__).read_text(encoding="utf-8"))
    assert match, f"bert_tf/cli/{tool}.py does not call run_tool(main_fn, OptionsClass, ...)"
    return getattr(module, match.group(1))


def _defined(tool: str) -> flags.FlagValues:
    flag_values = flags.FlagValues()
    define_flags(_options_class(tool), flag_values)
    return flag_values


def test_every_tool_is_a_wrapper_of_its_cli_module():
    assert len(TOOLS) >= 12
    for tool in TOOLS:
        text = (PROJECT_ROOT / "tools" / f"{tool}.py").read_text(encoding="utf-8")
        assert f"from bert_tf.cli.{tool} import main" in text, tool
        assert dataclasses.is_dataclass(_options_class(tool)), tool


@pytest.mark.parametrize("path", sorted((PROJECT_ROOT / "tools").glob("*.py"))
                         + sorted((PROJECT_ROOT / "bert_tf" / "cli").glob("*.py")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_flag_is_defined_by_hand(path):
    if path.stem in {"flags_from_options", "__init__"} and path.parent.name == "cli":
        return  # the generator itself, and run_tool's --verbose
    if path.stem in NOT_ABSL:
        return
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"\bDEFINE_\w+\(", text), f"{path} defines a flag by hand"
    assert "FLAGS." not in text, f"{path} reads absl FLAGS instead of its options object"


@pytest.mark.parametrize("tool", TOOLS)
def test_every_field_has_a_flag_and_every_flag_a_field(tool):
    options_class = _options_class(tool)
    flag_values = _defined(tool)
    specs = flag_specs(options_class)
    fields = {f.name for f in dataclasses.fields(options_class)}
    positional = positional_field(options_class)
    assert {s.field for s in specs} | ({positional} - {None}) == fields
    assert set(flag_values) == {s.name for s in specs}
    for spec in specs:
        assert spec.help.strip(), f"--{spec.name} of {tool} has no help text"
        assert spec.help in flag_values[spec.name].help  # absl adds "<a|b>: " to enums
        if not spec.required:
            default = flag_values[spec.name].default
            assert default == spec.default, (tool, spec.name)


@pytest.mark.parametrize("tool", sorted(ORIGINAL_FLAGS))
def test_original_flag_names_and_defaults(tool):
    flag_values = _defined(tool)
    missing = set(ORIGINAL_FLAGS[tool]) - set(flag_values)
    assert not missing, f"{tool} lacks the original's flags {sorted(missing)}"
    if tool in ("run_ner", "run_swag"):
        return
    for name, default in ORIGINAL_FLAGS[tool].items():
        assert flag_values[name].default == default, (tool, name)


def _value_for(spec) -> tuple[str, object]:
    """A non-default command-line value for a flag and what the options object should hold."""
    if spec.kind == "bool":
        return f"--{spec.name}={not spec.default}", not spec.default
    if spec.kind == "enum":
        value = next((c for c in spec.choices if c != spec.default), spec.choices[0])
        return f"--{spec.name}={value}", value
    if spec.kind == "integer":
        return f"--{spec.name}=7", 7
    if spec.kind == "float":
        return f"--{spec.name}=0.25", 0.25
    if spec.kind == "list":
        typed = {str: ["a", "b"], int: [3, 4], float: [0.5, 1.5]}[spec.element_type]
        return f"--{spec.name}={','.join(str(x) for x in typed)}", typed
    if spec.kind == "multi_string":
        return f"--{spec.name}=x y", ["x y"]
    return f"--{spec.name}=some/{spec.name}", f"some/{spec.name}"


@pytest.mark.parametrize("tool", TOOLS)
def test_parsed_values_reach_the_options_object(tool):
    options_class = _options_class(tool)
    flag_values = _defined(tool)
    argv, expected = ["prog"], {}
    for spec in flag_specs(options_class):
        arg, value = _value_for(spec)
        argv.append(arg)
        expected[spec.field] = value
    flag_values(argv)
    positional = positional_field(options_class)
    args = ["--a=1", "b"] if positional else []
    opts = options_from_flags(options_class, flag_values, args)
    for name, value in expected.items():
        got = getattr(opts, name)
        assert (list(got) if isinstance(got, tuple) else got) == value, (tool, name)
    if positional:
        assert list(getattr(opts, positional)) == args
    else:
        with pytest.raises(UserInputError, match="unexpected command-line arguments"):
            options_from_flags(options_class, flag_values, ["stray"])


def test_bad_list_element_names_the_flag():
    flag_values = _defined("sweep_learning_rate")
    flag_values(["prog", "--output_dir=x", "--learning_rates=1e-5,fast"])
    with pytest.raises(UserInputError, match="--learning_rates: 'fast' is not a valid float"):
        options_from_flags(_options_class("sweep_learning_rate"), flag_values)


def test_required_flags_are_the_fields_without_default():
    required = {s.name for s in flag_specs(_options_class("run_classifier")) if s.required}
    # --bert_hub_module_handle replaces the model files, --tfds_data_dir the data folder.
    assert required == {"task_name", "output_dir"}
    required = {s.name for s in flag_specs(_options_class("run_squad")) if s.required}
    assert required == {"bert_config_file", "vocab_file", "output_dir"}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROJECT_ROOT / "tools" / "run_classifier.py"),
                           *args], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300)


@pytest.mark.long
def test_user_error_is_one_line_and_verbose_shows_the_traceback(tmp_path):
    """Also: the TPU flags are accepted, --config is --flagfile, TF's C++ start-up log is off."""
    flagfile = tmp_path / "task.flags"
    flagfile.write_text("--task_name=no-such-task\n--do_train=true\n")
    args = ["--use_tpu=false", "--tpu_name=t", "--num_tpu_cores=8", "--iterations_per_loop=10",
            f"--config={flagfile}", f"--data_dir={tmp_path}", "--vocab_file=v",
            "--bert_config_file=c", f"--output_dir={tmp_path / 'out'}"]
    proc = _run(*args)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "error: Task not found: 'no-such-task' (--task_name must be one of cola, imdb, mnli, "
        "mrpc, qnli, qqp, rte, sst-2, sts-b, wnli, xnli)"], proc.stderr
    verbose = _run(*args, "--verbose")
    assert verbose.returncode == 1
    assert "Traceback" in verbose.stderr and "GlueDataError" in verbose.stderr


def test_integer_list_flags():
    from bert_tf.errors import UserInputError
    from bert_tf.options import integer_list
    from bert_tf.quickstart.job import QuickstartOptions

    assert integer_list("1, 2,,3 ", "seeds") == [1, 2, 3]
    for bad in ("", " , ", "1,x", "1.5"):
        with pytest.raises(ValueError, match=f"^--seeds={bad!r}: expected comma-separated"):
            integer_list(bad, "seeds")
    with pytest.raises(UserInputError, match="^--seeds='a': expected comma-separated integers"):
        QuickstartOptions(seeds="a").seed_list()
