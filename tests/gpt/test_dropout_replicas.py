"""GptDropout under MirroredStrategy: each replica applies its slice of the masks one device
draws for the global batch (per element, and per example with the classifier's noise shape),
and the embedding table's dropout applies the one table mask on every replica. Run in a
subprocess: two logical CPUs must be set before TensorFlow starts."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_WORKER = r"""
import json
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from bert_tf.gpt.dropout import GptDropout

def layer(kind):
    if kind == "table":
        return GptDropout(0.1, replica_sliced=False, seed=11)
    if kind == "clf":
        return GptDropout(0.1, noise_shape=(None, 1, None), seed=11)
    return GptDropout(0.1, seed=11)

report = {}
for kind in ("activations", "clf", "table"):
    for dtype in ("float32", "bfloat16"):
        shape = [6, 2, 40] if kind == "clf" else [6, 5, 8]
        x = tf.cast(tf.random.stateless_normal(shape, seed=[1, 2]) + 3.0, dtype)
        one = layer(kind)
        expected = [one(x, training=True).numpy() for _ in range(2)]  # two calls: two masks
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            mirrored = layer(kind)
        half = shape[0] // 2
        if kind == "table":  # every replica holds the whole table
            inputs = strategy.experimental_distribute_values_from_function(lambda ctx: x)
        else:
            inputs = strategy.experimental_distribute_values_from_function(
                lambda ctx: x[ctx.replica_id_in_sync_group * half:
                              (ctx.replica_id_in_sync_group + 1) * half])
        step = tf.function(lambda v: strategy.run(lambda t: mirrored(t, training=True),
                                                  args=(v,)))
        got = []
        for _ in range(2):
            parts = [t.numpy() for t in strategy.experimental_local_results(step(inputs))]
            got.append(parts)
        same = []
        for want, parts in zip(expected, got):
            if kind == "table":
                same.append(all(np.array_equal(p, want) for p in parts))
            else:
                same.append(bool(np.array_equal(np.concatenate(parts), want)))
        dropped = float(np.mean(expected[0] == 0))
        report[f"{kind}-{dtype}"] = {"same": same, "dropped": dropped,
                                     "masks_differ": bool(not np.array_equal(expected[0],
                                                                             expected[1]))}
print(json.dumps(report))
"""


def test_replicas_apply_their_slice_of_the_one_device_masks():
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-c", _WORKER], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(report) == sorted(f"{k}-{d}" for k in ("activations", "clf", "table")
                                    for d in ("float32", "bfloat16"))
    for name, r in report.items():
        assert r["same"] == [True, True], (name, r)
        assert r["masks_differ"], name  # a new mask every call
        assert 0.02 < r["dropped"] < 0.3, (name, r)  # rate 0.1 (clf: per example, 6 draws)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_inputs_get_the_float32_masks_and_rate(dtype):
    """Mixed precision: a 16-bit input is dropped where a float32 one would be (the draws do not
    depend on the dtype), at the configured rate. Keras' layer draws bfloat16 uniforms for a
    bfloat16 input and drops 10.16% for 0.1."""
    import numpy as np
    import tensorflow as tf

    from bert_tf.gpt.dropout import GptDropout

    x = tf.ones([1000, 1000])
    full, half = GptDropout(0.1, seed=5), GptDropout(0.1, seed=5, dtype=f"mixed_{dtype}")
    for _ in range(2):  # two calls: two masks, the same for both dtypes
        want = full(x, training=True).numpy() != 0
        got = half(tf.cast(x, dtype), training=True)
        assert got.dtype == dtype
        got = got.numpy().astype(np.float32)
        assert np.array_equal(got != 0, want)
    dropped = float(np.mean(got == 0))
    assert abs(dropped - 0.1) < 0.0015, dropped  # 5 standard deviations over 10^6 elements
    np.testing.assert_allclose(got[got != 0], 1 / 0.9, rtol=2 ** -7)  # the 16-bit scale


def test_gpt_and_bert_dropout_draw_the_same_16_bit_masks():
    """One dropout draw in the project: seeded alike, GptDropout and BertDropout drop the same
    elements and scale the rest by the same 65536 / (65536 − 6554) for a rate of 0.1."""
    import numpy as np
    import tensorflow as tf

    from bert_tf.gpt.dropout import GptDropout
    from bert_tf.modeling.dropout import BertDropout

    x = tf.random.stateless_normal([64, 33, 7], seed=[3, 4]) + 5.0
    gpt, bert = GptDropout(0.1, seed=9), BertDropout(0.1, seed=9)
    for _ in range(2):
        got, want = gpt(x, training=True).numpy(), bert(x, training=True).numpy()
        np.testing.assert_array_equal(got, want)
    kept = got != 0
    np.testing.assert_allclose(got[kept] / x.numpy()[kept], 65536 / (65536 - 6554), rtol=1e-6)
    assert np.array_equal(gpt(x, training=False).numpy(), x.numpy())
