"""Training curves: TensorBoard scalars read back and drawn into one PNG (matplotlib).

Every training loop of bert_tf (fine-tuning and pretraining) writes its scalars (loss, learning
rate, speed, ...) as TensorBoard events under its output folder; `plot_training_curves` draws them,
one panel per scalar, e.g. `<output_dir>/curves.png`:

    from bert_tf.plotting import plot_training_curves
    plot_training_curves("/tmp/mrpc_output", "/tmp/mrpc_output/curves.png")

A run resumed after an interruption writes a second events file that repeats the steps after its
last checkpoint; `read_scalars` keeps, for every step, the value written last (the resumed run's).
"""
from __future__ import annotations

import io
import math
import os
from typing import Iterable, Mapping, Sequence, Union

import numpy as np

Curves = dict[str, list[tuple[int, float]]]
"""tag -> [(step, value)] sorted by step."""

History = Union[str, os.PathLike, Mapping[str, Sequence], Sequence[Mapping[str, float]]]

# Panels first in this order (when present), then the others alphabetically.
_PREFERRED = ("loss", "masked_lm_loss", "next_sentence_loss", "learning_rate", "grad_norm",
              "steps_per_second", "examples_per_second")


def _event_files(logdir: str) -> list[str]:
    import tensorflow as tf

    files = []
    for directory, _, names in tf.io.gfile.walk(logdir):
        files += [os.path.join(directory, n) for n in names if "tfevents" in n]
    return files


def read_scalars(logdir: str | os.PathLike, tags: Iterable[str] | None = None) -> Curves:
    """Scalars of every TensorBoard events file under `logdir` (searched recursively).

    Args:
      logdir: a folder (e.g. a run's output_dir) or one events file.
      tags: only these tags (default: all).

    Returns:
      tag -> [(step, value)] sorted by step; for a step written more than once (a resumed run),
      the value with the latest wall time.

    Raises:
      FileNotFoundError naming `logdir` when it holds no events file.
    """
    import tensorflow as tf

    logdir = os.fspath(logdir)
    files = [logdir] if not tf.io.gfile.isdir(logdir) and "tfevents" in logdir \
        else _event_files(logdir)
    if not files:
        raise FileNotFoundError(f"{logdir}: no TensorBoard events file (*tfevents*) found")
    wanted = set(tags) if tags is not None else None
    latest: dict[str, dict[int, tuple[float, float]]] = {}
    for path in files:
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if wanted is not None and value.tag not in wanted:
                    continue
                if value.HasField("simple_value"):
                    number = float(value.simple_value)
                elif value.HasField("tensor"):
                    array = tf.make_ndarray(value.tensor)
                    if array.size != 1 or not np.issubdtype(array.dtype, np.number):
                        continue
                    number = float(array.reshape(()))
                else:
                    continue
                per_step = latest.setdefault(value.tag, {})
                previous = per_step.get(event.step)
                if previous is None or event.wall_time >= previous[0]:
                    per_step[event.step] = (event.wall_time, number)
    return {tag: sorted((step, v) for step, (_, v) in per_step.items())
            for tag, per_step in latest.items()}


def _curves_from_history(history) -> Curves:
    if isinstance(history, Mapping):  # tag -> values (steps 1..n) or [(step, value)]
        curves = {}
        for tag, values in history.items():
            values = list(values)
            if values and isinstance(values[0], (tuple, list)):
                curves[tag] = [(int(s), float(v)) for s, v in values]
            else:
                curves[tag] = [(i + 1, float(v)) for i, v in enumerate(values)]
        return curves
    curves: Curves = {}
    for i, record in enumerate(history):  # [{"step": ..., "loss": ..., ...}]
        step = int(record.get("step", i + 1))
        for tag, value in record.items():
            if tag != "step" and isinstance(value, (int, float)):
                curves.setdefault(tag, []).append((step, float(value)))
    return curves


def plot_training_curves(logdir_or_history: History, png_path: str | os.PathLike,
                         title: str | None = None) -> str:
    """Draws the training curves into a PNG, one panel per scalar.

    Args:
      logdir_or_history: a run's output folder (or events file) holding TensorBoard events; or a
        history: a list of per-step records `{"step": s, "loss": ..., ...}` (what the training
        loops return) or a dict `tag -> values`.
      png_path: where the PNG goes (local or a tf.io.gfile path such as gs://; written
        atomically).
      title: figure title (default: the folder's name).

    Returns:
      `png_path`.

    Raises:
      FileNotFoundError when the folder holds no events; ValueError when there is nothing to
      draw.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from bert_tf.io_utils import atomic_write_bytes

    if isinstance(logdir_or_history, (str, os.PathLike)):
        curves = read_scalars(logdir_or_history)
        title = title or os.path.basename(os.path.normpath(os.fspath(logdir_or_history)))
    else:
        curves = _curves_from_history(logdir_or_history)
    curves = {tag: points for tag, points in curves.items() if points}
    if not curves:
        raise ValueError("no scalar to plot")
    order = [t for t in _PREFERRED if t in curves] + sorted(t for t in curves
                                                            if t not in _PREFERRED)
    ncols = 2 if len(order) > 1 else 1
    nrows = math.ceil(len(order) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6 * ncols, 3.2 * nrows), squeeze=False)
    for ax, tag in zip(axes.flat, order):
        steps, values = zip(*curves[tag])
        ax.plot(steps, values, linewidth=1.2, marker="." if len(steps) < 50 else None)
        ax.set_title(tag)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        if tag == "learning_rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    for ax in list(axes.flat)[len(order):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    png_path = os.fspath(png_path)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(png_path, buffer.getvalue())  # local or any tf.io.gfile file system
    return png_path
