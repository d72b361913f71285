"""Prediction and evaluation run through `strategy.run` as training does: MirroredStrategy over
2 logical CPUs predicts real MRPC dev pairs as one device does (1e-5), the last partial batch
included (21 rows in batches of 8: 8, 8, 5), rows in example order. A fresh process
(`_predict_worker.py`): logical devices are set up before TF starts."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

WORKER = os.path.join(os.path.dirname(__file__), "_predict_worker.py")


@pytest.mark.slow  # a fresh TF process and three models: ~30 s on the shared machine
def test_mirrored_prediction_equals_one_device(original_fixtures, shared_data):
    env = dict(os.environ, BERT_TF_FIXTURES=str(original_fixtures),
               BERT_TF_DATA=str(shared_data), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, WORKER, "21", "8"], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["replicas"] == 2
    one_device, mirrored = np.array(out["one_device"]), np.array(out["mirrored"])
    assert one_device.shape == mirrored.shape == (21, 2)
    np.testing.assert_allclose(mirrored, one_device, atol=1e-5, rtol=0)
    # Not all rows alike (the comparison could not pass with rows out of order).
    assert np.ptp(one_device[:, 1] - one_device[:, 0]) > 1e-3
    # The same evaluation figure: accuracy of the argmax on the 21 labelled rows.
    labels = np.array(out["labels"])
    assert (mirrored.argmax(-1) == labels).mean() == (one_device.argmax(-1) == labels).mean()
    # A global batch the 2 replicas cannot share is one clear error naming the flag.
    assert out["odd_batch_error"] is not None and "--predict_batch_size" in out["odd_batch_error"]
