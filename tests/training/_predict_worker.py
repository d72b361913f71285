"""Predicts real MRPC dev pairs with the original release's tiny fixture BERT (L2 H128, a
classifier head from a fixed seed) on one device and with MirroredStrategy over 2 logical CPUs,
through the shipped `finetuning.predict_arrays`, in a fresh process (logical CPU devices must be
set up before TF starts). Prints {"one_device": logits, "mirrored": logits, ...} as JSON on the
last stdout line.

usage: _predict_worker.py NUM_EXAMPLES BATCH_SIZE [multi_worker_mirrored]
(multi_worker_mirrored: one of 2 local workers named by TF_CONFIG instead of the 2 CPUs)
env: BERT_TF_FIXTURES (../shared/fixtures/original), BERT_TF_DATA (../shared/data)
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))
import tensorflow as tf  # noqa: E402
from _worker_devices import set_up_devices  # noqa: E402

multi_worker = len(sys.argv) > 3 and sys.argv[3] == "multi_worker_mirrored"
# multi_worker_mirrored: TF_CONFIG names the 2 local workers; collectives first
early_strategy = set_up_devices("multi_worker_mirrored" if multi_worker else "mirrored", 2)

import keras  # noqa: E402

from bert_tf.modeling import BertClassifier, BertConfig  # noqa: E402
from bert_tf.tasks import glue  # noqa: E402
from bert_tf.tokenization import FullTokenizer  # noqa: E402
from bert_tf.training import finetuning  # noqa: E402
from bert_tf.training.distribution import create_strategy  # noqa: E402

FIXTURES = os.environ["BERT_TF_FIXTURES"]
DATA = os.environ["BERT_TF_DATA"]
num_examples, batch_size = int(sys.argv[1]), int(sys.argv[2])

processor = glue.get_processor("mrpc")
examples = processor.get_dev_splits(os.path.join(DATA, "glue", "MRPC"))[0].examples[:num_examples]
tokenizer = FullTokenizer(os.path.join(FIXTURES, "vocab_uncased.txt"), do_lower_case=True)
features = glue.convert_examples_to_features(examples, processor.get_labels(), 64, tokenizer,
                                             "dev")
arrays = glue.features_to_arrays(features, False)
config = BertConfig.from_json_file(os.path.join(FIXTURES, "checkpoint", "bert_config.json"))
checkpoint = os.path.join(FIXTURES, "checkpoint", "bert_model.ckpt")


def predict(strategy, **kwargs):
    keras.utils.set_random_seed(7)  # the same fresh classifier head in both models
    with strategy.scope():
        model = BertClassifier(config, num_labels=2).build_from_config_shapes()
        finetuning.init_model(model, checkpoint)
    return finetuning.predict_arrays(model, arrays, batch_size, ["logits"], progress=False,
                                     **kwargs)["logits"], model


devices = [d.name for d in tf.config.list_logical_devices("CPU")]
mirrored_strategy = (early_strategy if multi_worker
                     else create_strategy("mirrored", devices=devices))
one_device, _ = predict(tf.distribute.get_strategy(), length_bucketing=False)
mirrored, mirrored_model = predict(mirrored_strategy)
# The strategy is the model's (its variables are MirroredVariables), and strategy.run is used.
assert finetuning.model_strategy(mirrored_model) is mirrored_strategy
replicas = mirrored_strategy.num_replicas_in_sync
try:
    finetuning.predict_arrays(mirrored_model, arrays, 3, ["logits"], progress=False)
    odd_batch_error = None
except Exception as e:  # noqa: BLE001 (reported to the test)
    odd_batch_error = f"{type(e).__name__}: {e}"
print(json.dumps({"replicas": replicas, "one_device": one_device.tolist(),
                  "mirrored": mirrored.tolist(),
                  "labels": arrays["label_ids"].tolist(), "odd_batch_error": odd_batch_error}))
