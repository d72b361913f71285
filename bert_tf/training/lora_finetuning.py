"""LoRA in the fine-tuning scripts: `--lora_rank`, `--lora_alpha`, `--lora_targets`,
`--lora_dropout` (issue 34), over `bert_tf.modeling.lora`.

`LoraOptions` is declared once, as `MemoryOptions` is: the fine-tuning runs' option dataclasses
(`tasks.run_options.FinetuningRunOptions`, `tasks.gpt_classifier.GptClassifierRunOptions`) and
the loop's `finetuning.FinetuneOptions` inherit it, so every fine-tuning script has the flags.
`--lora_rank=0` (the default) is off: the loop runs the original fine-tuning, graph and numbers
unchanged. With r > 0, `train_model`, after the weights are initialised (e.g. from Google's
`bert_model.ckpt`, whose names the adapters do not need), adds rank-r adapters to the target
layers, freezes every other weight of the encoder (the task head, new, stays trainable) and
prints how many parameters train.

The run's checkpoints (`model.ckpt-N`) hold the adapters under their kernels' original names
(`.../query/lora_a`, `.../lora_b`, the scalar `.../lora_alpha`), their Adam slots, and the
adapter-dropout streams, so a killed run resumes exactly; anything that loads a run's checkpoint
through `finetuning.load_checkpoint` (prediction without training, GPT-1's classifier, export)
re-creates the adapters from it (`enable_lora_from_checkpoint`). At the end of training the
adapters and the head are also written as `<output_dir>/lora_weights.npz`
(`modeling.lora.save_lora_weights`: a small file to ship beside the base model), and
tools/export_savedmodel.py merges the adapters into the kernels (`modeling.lora.merge_lora`).
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.errors import UserInputError
from bert_tf.modeling import lora
from bert_tf.options import option

__all__ = ["LORA_WEIGHTS_FILE", "LoraOptions", "apply_lora_options", "check_lora_options",
           "checkpoint_lora_layers", "enable_lora_from_checkpoint", "lora_variable_map",
           "trainable_parameter_report"]

LORA_WEIGHTS_FILE = "lora_weights.npz"
"""The adapters (and the task head) of a LoRA run, written to its output_dir after training."""


@dataclasses.dataclass(kw_only=True)
class LoraOptions:
    """LoRA fine-tuning (`bert_tf.training.lora_finetuning`); rank 0 is off."""

    lora_rank: int = option(
        0, "LoRA: add rank-r adapters to the --lora_targets layers, freeze the other encoder "
        "weights and train only the adapters and the task head. 0: off (the original "
        "fine-tuning of every weight).")
    lora_alpha: float | None = option(
        None, "LoRA: the adapters' update is scaled by alpha / rank (default: alpha = rank, "
        "scale 1).")
    lora_targets: list[str] = option(
        list(lora.DEFAULT_TARGETS), "LoRA: the layers to adapt, by name (query, key, value, "
        "attention_output_dense, intermediate_dense, output_dense, pooler; GPT-1: c_attn, "
        "c_proj, c_fc) or Keras-path pattern (*/layer_11/*/value).")
    lora_dropout: float = option(
        0.0, "LoRA: dropout on the adapters' input while training (the base path sees the "
        "undropped input), 0 <= p < 1.")

    def __post_init__(self) -> None:
        check_lora_options(self)
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()


def check_lora_options(opts) -> None:
    """UserInputError, one line naming the flag, for a LoRA setting that cannot work (the
    targets are checked against the model when LoRA is enabled)."""
    rank = opts.lora_rank
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 0:
        raise UserInputError(f"--lora_rank={rank!r}: expected an integer >= 0 (0: LoRA off)")
    alpha = opts.lora_alpha
    if alpha is not None and not (isinstance(alpha, (int, float)) and alpha > 0):
        raise UserInputError(f"--lora_alpha={alpha!r}: expected a number > 0")
    p = opts.lora_dropout
    if not (isinstance(p, (int, float)) and 0 <= p < 1):
        raise UserInputError(f"--lora_dropout={p!r}: expected a probability in [0, 1)")
    targets = opts.lora_targets
    if isinstance(targets, str):
        targets = [t for t in targets.split(",") if t.strip()]
    if rank > 0 and not targets:
        raise UserInputError("--lora_targets is empty: expected layer names such as query,value")


def apply_lora_options(model, opts, strategy=None) -> list[str]:
    """Enables LoRA on `model` as `opts` (`LoraOptions`) says; [] when `opts.lora_rank` is 0.

    A model that already has adapters (re-created from a run's checkpoint) is left as it is
    when they are the options' rank and alpha. Adapter variables are created under `strategy`'s
    scope (the model's). Prints the trainable parameter count.

    With `opts.lora_rank` 0, adapters the model already has (`modeling.lora.enable_lora` called
    by the user, or re-created from a run's checkpoint) are kept and trained as they are.

    When `opts.output_dir` (`FinetuneOptions`) holds a checkpoint, which `train_model` resumes
    from, its adapters must be the ones the options create: the same layers (--lora_targets),
    rank and alpha.

    Raises:
      UserInputError naming the flag: a target that matches no layer, or LoRA settings (rank,
      alpha, targets) that differ from the adapters already in the model or in the checkpoint
      in --output_dir (naming the checkpoint and both target lists).
    """
    check_lora_options(opts)
    present = lora.lora_layers(model)
    if opts.lora_rank == 0:
        if present:  # enabled through the Python API, or re-created from a run's checkpoint
            logging.info("--lora_rank=0: training the model's own LoRA adapters (%d layers)",
                         len(present))
            print(trainable_parameter_report(model, sorted(present)))
        return sorted(present)
    alpha = float(opts.lora_alpha if opts.lora_alpha is not None else opts.lora_rank)
    latest = _output_dir_checkpoint(opts)
    if present:
        where = f"the checkpoint {latest}" if latest else "the model's own adapters"
        for path, layer in present.items():
            if (int(layer.lora_rank), float(layer.lora_alpha)) != (opts.lora_rank, alpha):
                raise UserInputError(
                    f"--lora_rank={opts.lora_rank} --lora_alpha={alpha:g}: the checkpoint in "
                    f"--output_dir adapts {path} with rank {layer.lora_rank}, alpha "
                    f"{float(layer.lora_alpha):g}; pass that run's flags")
        _check_same_layers(opts, where, set(present),
                           {layer.path for layer in lora.target_layers(model, opts.lora_targets)})
        if opts.lora_dropout:
            _add_dropout(model, opts.lora_dropout, strategy)
        paths = sorted(present)
    else:
        scope = strategy.scope() if strategy is not None else _null_scope()
        try:
            with scope:
                paths = lora.enable_lora(model, rank=opts.lora_rank, alpha=alpha,
                                         targets=opts.lora_targets,
                                         dropout=float(opts.lora_dropout),
                                         seed=getattr(opts, "seed", 0))
        except lora.LoraError as e:
            raise UserInputError(f"--lora_targets / --lora_dropout: {e}") from None
        if latest:  # train_model resumes from it: its adapters must be these
            _check_resumed_adapters(model, opts, alpha, latest)
    print(trainable_parameter_report(model, paths))
    return paths


def _output_dir_checkpoint(opts) -> str | None:
    """The latest checkpoint in `opts.output_dir` (the one a run resumes from), or None."""
    output_dir = getattr(opts, "output_dir", None)
    if not output_dir:
        return None
    from bert_tf.checkpoints import latest_checkpoint

    return latest_checkpoint(output_dir)


def _describe_targets(paths) -> str:
    """The layer names of adapter paths / kernel prefixes (their last part), comma-joined."""
    return ",".join(sorted({p.rstrip("/").rsplit("/", 1)[-1] for p in paths})) or "(none)"


def _check_same_layers(opts, source: str, have: set, want: set) -> None:
    """UserInputError naming --lora_targets, `source` (the checkpoint) and both target lists
    when its adapted layers (`have`) are not the ones the flag selects (`want`)."""
    if have == want:
        return
    flag = opts.lora_targets
    flag = flag if isinstance(flag, str) else ",".join(flag)
    odd = sorted(have ^ want)[0]
    raise UserInputError(
        f"--lora_targets={flag}: {source} adapts "
        f"{_describe_targets(have)} ({len(have)} layers), these targets adapt "
        f"{_describe_targets(want)} ({len(want)} layers; e.g. {odd} is in only one); pass that "
        "run's --lora_targets")


def _check_resumed_adapters(model, opts, alpha: float, latest: str) -> None:
    """Compares the adapters just enabled on `model` with those of the checkpoint the run will
    resume from (train_model's `--output_dir`): same layers (by kernel checkpoint name), rank
    and alpha; UserInputError naming the flags and the checkpoint otherwise."""
    from bert_tf.checkpoints import checkpoint_variable_map

    saved = checkpoint_lora_layers(latest)
    if not saved:
        raise UserInputError(
            f"--lora_rank={opts.lora_rank}: the checkpoint {latest} in --output_dir has no LoRA "
            "adapters (a run without --lora_rank); resume it without LoRA or use another "
            "--output_dir")
    with lora.base_kernels(model):
        names = dict(checkpoint_variable_map(model))
    ours = {n[: -len("/lora_a")] for n in lora.checkpoint_names(model, names)
            if n.endswith("/lora_a")}
    for prefix, (rank, saved_alpha) in sorted(saved.items()):
        if prefix in ours and (rank, saved_alpha) != (opts.lora_rank, alpha):
            raise UserInputError(
                f"--lora_rank={opts.lora_rank} --lora_alpha={alpha:g}: the checkpoint {latest} "
                f"adapts {prefix} with rank {rank}, alpha {saved_alpha:g}; pass that run's flags")
    _check_same_layers(opts, f"the checkpoint {latest}", set(saved), ours)


def _null_scope():
    import contextlib

    return contextlib.nullcontext()


def _add_dropout(model, rate, strategy) -> None:
    """Attaches adapter dropout to adapters re-created from a checkpoint (which records rank
    and alpha, not the dropout: a resumed run passes --lora_dropout again)."""
    scope = strategy.scope() if strategy is not None else _null_scope()
    with scope:
        for i, (path, layer) in enumerate(sorted(lora.lora_layers(model).items())):
            if getattr(layer, "lora_dropout", None) is None:
                lora.add_adapter_dropout(layer, rate, seed=i)


def trainable_parameter_report(model, paths) -> str:
    """One line: adapters, head and total trainable parameters of a LoRA model."""
    adapters = lora.lora_parameter_count(model)
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    total = sum(int(np.prod(v.shape)) for v in model.weights)
    return (f"LoRA on {len(paths)} layers: {trainable:,} trainable parameters "
            f"({adapters:,} in the adapters, {trainable - adapters:,} in the task head) of "
            f"{total:,} ({100.0 * trainable / max(total, 1):.2f}%)")


def lora_variable_map(model, variable_map, alphas: bool = False) -> dict:
    """`variable_map(model)` (checkpoint name -> variable, e.g. `checkpoints.
    checkpoint_variable_map`) with LoRA understood: base kernels under their usual names, plus
    each adapter's `<kernel prefix>/lora_a` and `/lora_b` variables, and with `alphas` its
    `/lora_alpha` (a float32 NumPy scalar: written to checkpoints, never assigned). Without
    LoRA: `variable_map(model)` itself."""
    if not lora.lora_layers(model):
        return variable_map(model)
    with lora.base_kernels(model):
        names = dict(variable_map(model))
    adapters = lora.checkpoint_names(model, names)
    names.update({n: v for n, v in adapters.items()
                  if alphas or not n.endswith("/lora_alpha")})
    return names


def checkpoint_lora_layers(prefix: str) -> dict[str, tuple[int, float]]:
    """{kernel prefix: (rank, alpha)} of the adapters a checkpoint holds ({} for none)."""
    reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    shapes = reader.get_variable_to_shape_map()
    found = {}
    for name, shape in shapes.items():
        if name.endswith("/lora_a") and len(shape) == 2:
            base = name[: -len("/lora_a")]
            alpha = (float(reader.get_tensor(f"{base}/lora_alpha"))
                     if f"{base}/lora_alpha" in shapes else float(shape[1]))
            found[base] = (int(shape[1]), alpha)
    return found


def enable_lora_from_checkpoint(model, prefix: str, variable_map) -> list[str]:
    """Re-creates the adapters a run's checkpoint holds on `model` (not their values: load the
    checkpoint afterwards, `lora_variable_map` names them). Returns the adapted layers' paths
    ([] when the checkpoint has none, or the model already has adapters).

    Raises:
      UserInputError naming the checkpoint when an adapter's kernel is not a layer of `model`.
    """
    wanted = checkpoint_lora_layers(prefix)
    if not wanted or lora.lora_layers(model):
        return []
    kernel_names = {id(v): n for n, v in variable_map(model).items()}
    by_prefix = {}  # kernel name without its last part (kernel, or GPT-1's w) -> layer
    for layer in lora.adaptable_layers(model):
        name = kernel_names.get(id(lora.base_kernel(layer)))
        if name is not None:
            by_prefix[name.rsplit("/", 1)[0]] = layer
    paths = []
    for base, (rank, alpha) in sorted(wanted.items()):
        layer = by_prefix.get(base)
        if layer is None:
            raise UserInputError(f"{prefix} has LoRA adapters for {base}, which is not an "
                                 f"adaptable layer of {type(model).__name__}")
        paths += lora.enable_lora(model, rank=rank, alpha=alpha, targets=(layer.path,))
    logging.info("%s holds LoRA adapters: re-created them on %d layers", prefix, len(paths))
    return paths


def save_run_adapters(model, output_dir: str) -> str | None:
    """Writes `<output_dir>/lora_weights.npz` when `model` has LoRA; returns its path."""
    if not lora.lora_layers(model):
        return None
    path = lora.save_lora_weights(model, os.path.join(output_dir, LORA_WEIGHTS_FILE))
    logging.info("LoRA adapters and head: %s", path)
    return path
