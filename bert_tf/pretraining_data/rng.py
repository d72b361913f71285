"""Random-number helpers: a tracing `random.Random` that records every top-level call (for
comparing the call order with the original's trace), and per-shard seed derivation."""
from __future__ import annotations

import hashlib
import linecache
import random
import re
import sys
from typing import Any, MutableSequence

import numpy as np

_SITE_RE = re.compile(r"#\s*rng-site:\s*(\S+)")


def _caller_site(depth: int) -> str:
    """Site label of the library line that called the RNG.

    Every RNG call in `bert_tf.pretraining_data` sits on a line ending with `# rng-site: <label>`
    (labels as in the fixture trace). Unlabelled callers get `function:line`.
    """
    frame = sys._getframe(depth)
    code = frame.f_code
    line = linecache.getline(code.co_filename, frame.f_lineno)
    match = _SITE_RE.search(line)
    if match:
        return match.group(1)
    return f"{code.co_name}:{frame.f_lineno}"


class TracingRandom(random.Random):
    """`random.Random` that logs each top-level `random()`, `randint()` and `shuffle()` call.

    The stream of numbers is exactly `random.Random(seed)`'s: `_randbelow` is pinned to the
    getrandbits algorithm (a subclass overriding `random()` would otherwise switch CPython to a
    different `randint`/`shuffle` algorithm). Internal draws of `randint`/`shuffle` are not
    logged separately.

    Attributes:
      calls: list of dicts in call order, in the fixture trace's format:
        `{"n", "site", "fn": "random", "result"}`, `{"n", "site", "fn": "randint", "a", "b",
        "result"}`, `{"n", "site", "fn": "shuffle", "len", "perm"}` where `perm[i]` is the
        pre-shuffle index of the element now at position i.
    """

    _randbelow = random.Random._randbelow_with_getrandbits

    def __init__(self, seed: Any = None):
        self.calls: list[dict] = []
        super().__init__(seed)

    def _log(self, entry: dict) -> None:
        entry["n"] = len(self.calls)
        entry["site"] = _caller_site(3)
        self.calls.append(entry)

    def random(self) -> float:
        """Same as `random.Random.random`, logged."""
        result = super().random()
        self._log({"fn": "random", "result": result})
        return result

    def randint(self, a: int, b: int) -> int:
        """Same as `random.Random.randint` (inclusive bounds), logged."""
        result = super().randint(a, b)
        self._log({"fn": "randint", "a": a, "b": b, "result": result})
        return result

    def shuffle(self, x: MutableSequence) -> None:
        """Same permutation as `random.Random.shuffle`, logged with `len` and `perm`."""
        perm = list(range(len(x)))
        super().shuffle(perm)
        x[:] = [x[i] for i in perm]
        self._log({"fn": "shuffle", "len": len(perm), "perm": perm})


def shard_seed(seed: int, shard_index: int) -> int:
    """Seed of shard `shard_index` in scalable mode: a 64-bit hash of (seed, shard_index).

    It depends on nothing else (not on the number of workers or the run), so a shard's content
    is the same whoever makes it.
    """
    digest = hashlib.sha256(f"bert_tf.pretraining_data:{int(seed)}:{int(shard_index)}".encode()).digest()
    return int.from_bytes(digest[:8], "little")



class ScalableRandom(random.Random):
    """The generator of scalable mode: `random.Random` (Mersenne Twister) for `random()` and
    `randint()`, and a numpy PCG64 stream, seeded from the same seed, for `shuffle()`.

    A shuffle then costs one vectorised permutation instead of one Python-level draw per
    element (the original's main cost). The result is deterministic for a seed but is not the
    original's stream; faithful mode never uses this class.
    """

    def __init__(self, seed: int):
        super().__init__(seed)
        self._np = np.random.Generator(np.random.PCG64(seed))

    def randint(self, a: int, b: int) -> int:
        """Same value as `random.Random.randint(a, b)` (b >= a), without its argument checks."""
        return a + self._randbelow(b - a + 1)

    def shuffle(self, x: MutableSequence) -> None:
        """Permutes `x` in place with the numpy stream."""
        n = len(x)
        if n < 2:
            return
        perm = self._np.permutation(n).tolist()
        x[:] = [x[i] for i in perm]
