"""The masking mixtures of BERT Table 8 as options of data generation: the default is the
original's 80/10/10 draw for draw, the six mixtures give their shares, bad mixtures are one
clear error."""
from __future__ import annotations

import random

import pytest

from bert_tf.pretraining_data.masking import VocabInfo, create_masked_lm_predictions
from bert_tf.pretraining_data.options import PretrainingDataError, PretrainingDataOptions

VOCAB = {t: i for i, t in enumerate(["[PAD]", "[CLS]", "[SEP]", "[MASK]"]
                                     + [f"w{i}" for i in range(500)])}
MASK_ID = VOCAB["[MASK]"]


def _shares(options: PretrainingDataOptions, n: int = 1500, seed: int = 1) -> dict:
    info = VocabInfo.from_vocab(VOCAB)
    rng = random.Random(seed)
    counts = {"mask": 0, "same": 0, "random": 0}
    outputs = []
    for _ in range(n):
        ids = [1] + [rng.randint(4, len(VOCAB) - 1) for _ in range(60)] + [2]
        out, positions, labels = create_masked_lm_predictions(ids, options, info, rng)
        outputs.append((out, positions, labels))
        for p in positions:
            kind = "mask" if out[p] == MASK_ID else "same" if out[p] == ids[p] else "random"
            counts[kind] += 1
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()}, outputs


def test_explicit_80_10_10_is_the_default_draw_for_draw():
    # (The default against the original release: tests/pretraining_data/test_pretraining_faithful.py.)
    base = PretrainingDataOptions(max_predictions_per_seq=40, masked_lm_prob=0.3)
    explicit = PretrainingDataOptions(max_predictions_per_seq=40, masked_lm_prob=0.3,
                                      mask_token_prob=0.8, keep_token_prob=0.1,
                                      random_token_prob=0.1)
    assert base.is_original_behaviour and base.to_dict() == explicit.to_dict()
    assert "mask_token_prob" not in base.to_dict()  # fingerprints of older outputs unchanged
    assert _shares(base)[1] == _shares(explicit)[1]


@pytest.mark.parametrize("mixture", [(0.8, 0.1, 0.1), (1.0, 0.0, 0.0), (0.8, 0.0, 0.2),
                                     (0.8, 0.2, 0.0), (0.0, 0.2, 0.8), (0.0, 0.0, 1.0)])
def test_mixture_shares(mixture):
    options = PretrainingDataOptions(max_predictions_per_seq=40, masked_lm_prob=0.3,
                                     mask_token_prob=mixture[0], keep_token_prob=mixture[1],
                                     random_token_prob=mixture[2])
    options.validate()
    shares, _ = _shares(options)
    # A random word is the original word or [MASK] with probability 1/504 each.
    for got, want in zip((shares["mask"], shares["same"], shares["random"]), mixture):
        assert abs(got - want) < 0.02, (mixture, shares)
    assert options.is_original_behaviour == (mixture == (0.8, 0.1, 0.1))


def test_bad_mixture_is_one_error_naming_the_flags():
    with pytest.raises(PretrainingDataError, match=r"--mask_token_prob=0.5.*sum to 1"):
        PretrainingDataOptions(mask_token_prob=0.5).validate()
    with pytest.raises(PretrainingDataError, match="sum to 1"):
        PretrainingDataOptions(mask_token_prob=1.2, keep_token_prob=-0.1,
                               random_token_prob=-0.1).validate()


def _tool_args(original_fixtures) -> tuple[list[str], dict, str]:
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = [sys.executable, os.path.join(root, "tools", "create_pretraining_data.py"),
            f"--input_file={original_fixtures / 'sample_text.txt'}",
            f"--vocab_file={original_fixtures / 'vocab_uncased.txt'}",
            "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=2"]
    return args, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), root


def test_mixture_flags_of_create_pretraining_data(original_fixtures, tmp_path):
    """The Table 8 mixtures are flags of the real tool: 100/0/0 on the original's sample text
    puts [MASK] at every predicted position."""
    import subprocess

    import tensorflow as tf

    args, env, root = _tool_args(original_fixtures)
    vocab = str(original_fixtures / "vocab_uncased.txt")
    out = str(tmp_path / "mask100.tfrecord")
    proc = subprocess.run(args + [f"--output_file={out}", "--mask_token_prob=1.0",
                                  "--keep_token_prob=0", "--random_token_prob=0"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(vocab, encoding="utf-8") as f:
        mask_id = [line.strip() for line in f].index("[MASK]")
    predicted = 0
    for record in tf.data.TFRecordDataset(out):
        example = tf.train.Example.FromString(record.numpy()).features.feature
        ids = example["input_ids"].int64_list.value
        weights = example["masked_lm_weights"].float_list.value
        for pos, w in zip(example["masked_lm_positions"].int64_list.value, weights):
            if w > 0:
                predicted += 1
                assert ids[pos] == mask_id
    assert predicted > 100


@pytest.mark.slow
def test_bad_mixture_flags_are_one_error_line(original_fixtures, tmp_path):
    import subprocess

    args, env, root = _tool_args(original_fixtures)
    bad = subprocess.run(args + [f"--output_file={tmp_path / 'bad.tfrecord'}",
                                 "--mask_token_prob=0.5"],
                         capture_output=True, text=True, timeout=300, env=env, cwd=root)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    last = bad.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "--mask_token_prob=0.5" in last and "sum to 1" in last
    assert not (tmp_path / "bad.tfrecord").exists()
