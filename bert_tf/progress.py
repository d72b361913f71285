"""Progress bars for long jobs: a Keras `Progbar` (count, rate and ETA) tuned for logs.

On a terminal the bar redraws in place every 0.1 s; when stdout is a file or a pipe (batch jobs,
CI logs) it prints one line at most every 30 s, so a long run's log stays short.
"""
from __future__ import annotations

import sys
from typing import Sequence


def progress_bar(target: int | None, unit_name: str = "step",
                 stateful_metrics: Sequence[str] | None = None, enabled: bool = True):
    """A `keras.utils.Progbar` for `target` units (None: unknown total), or None when not
    `enabled` (callers then skip their `update` calls).

    Args:
      target: total number of units.
      unit_name: what is counted ("step", "example", ...), shown in the rate.
      stateful_metrics: values shown as given (e.g. the current loss), not averaged.
      enabled: False gives None.
    """
    if not enabled:
        return None
    import keras

    interactive = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
    return keras.utils.Progbar(target, stateful_metrics=list(stateful_metrics or []),
                               interval=0.1 if interactive else 30.0, unit_name=unit_name)
