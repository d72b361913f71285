"""Fine-tunes the original release's tiny fixture BERT (L2 H128, dropout 0.1) on 48 real MRPC
training pairs in a fresh process (logical CPU devices must be set up before TF starts), through
the shipped `finetuning.train_model`. Prints the per-step records as JSON on the last stdout line.

usage: _finetune_worker.py STRATEGY OUTPUT_DIR [NUM_CPU_DEVICES]
env: BERT_TF_FIXTURES (../shared/fixtures/original), BERT_TF_DATA (../shared/data)
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))
import tensorflow as tf  # noqa: E402
from _worker_devices import set_up_devices  # noqa: E402

strategy_name, output_dir = sys.argv[1], sys.argv[2]
n_cpu = int(sys.argv[3]) if len(sys.argv) > 3 else 1
early_strategy = set_up_devices(strategy_name, n_cpu)

import keras  # noqa: E402

from bert_tf.modeling import BertClassifier, BertConfig  # noqa: E402
from bert_tf.tasks import glue  # noqa: E402
from bert_tf.tasks.classifier import classification_loss  # noqa: E402
from bert_tf.tokenization import FullTokenizer  # noqa: E402
from bert_tf.training import finetuning  # noqa: E402
from bert_tf.training.distribution import create_strategy  # noqa: E402

FIXTURES = os.environ["BERT_TF_FIXTURES"]
DATA = os.environ["BERT_TF_DATA"]

processor = glue.get_processor("mrpc")
examples = processor.get_train_examples(os.path.join(DATA, "glue", "MRPC"))[:48]
tokenizer = FullTokenizer(os.path.join(FIXTURES, "vocab_uncased.txt"), do_lower_case=True)
features = glue.convert_examples_to_features(examples, processor.get_labels(), 32, tokenizer,
                                             "train")
arrays = glue.features_to_arrays(features, False)

devices = [d.name for d in tf.config.list_logical_devices("CPU")]
strategy = early_strategy or create_strategy(
    strategy_name, devices=devices if strategy_name == "mirrored" else None)
if strategy_name == "multi_worker_mirrored":
    # every worker reads the chief's checkpoints; only the chief writes (into its output_dir)
    output_dir = os.path.join(output_dir, "shared")
config = BertConfig.from_json_file(os.path.join(FIXTURES, "checkpoint", "bert_config.json"))
assert config.hidden_dropout_prob == 0.1 and config.attention_probs_dropout_prob == 0.1
keras.utils.set_random_seed(12345)
with strategy.scope():
    model = BertClassifier(config, num_labels=2).build_from_config_shapes()
    finetuning.init_model(model, os.path.join(FIXTURES, "checkpoint", "bert_model.ckpt"))
options = finetuning.FinetuneOptions(
    output_dir=output_dir, learning_rate=1e-3, num_train_steps=6, num_warmup_steps=1,
    train_batch_size=8, save_checkpoints_steps=3, shuffle_buffer=16, progress=False)


def loss_fn(outputs, batch):
    return classification_loss(outputs["logits"], batch["label_ids"])


result = finetuning.train_model(model, arrays, loss_fn, options, strategy=strategy)
print(json.dumps(result["history"]))
