"""GPT-1 LM pretraining data on a real tiny corpus (the pydoc topics text of bert_tf.corpora).

The BPE files are read from $BERT_TF_GPT_FIXTURES/bpe (default ../shared/fixtures/original_gpt);
the tests skip with a clear message when that folder, ftfy or spaCy is absent.
"""
from __future__ import annotations

import glob
import json
import os
import pathlib
import subprocess
import sys

import pytest

from bert_tf.errors import UserInputError
from bert_tf.pretraining_data.writer import parse_example, read_tfrecord

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
GPT_FIXTURES = pathlib.Path(os.environ.get(
    "BERT_TF_GPT_FIXTURES", PROJECT_ROOT.parent / "shared" / "fixtures" / "original_gpt"))
N_CTX = 64
DOCS_PER_SHARD = 20


@pytest.fixture(scope="module")
def bpe_spec():
    bpe_dir = GPT_FIXTURES / "bpe"
    encoders = sorted(bpe_dir.glob("encoder_bpe_*.json"))
    merges = sorted(bpe_dir.glob("vocab_*.bpe"))
    if not encoders or not merges:
        pytest.skip(f"needs the original GPT-1 BPE files in {bpe_dir} (../shared/fixtures/"
                    "original_gpt or $BERT_TF_GPT_FIXTURES); they are absent here")
    for module in ("ftfy", "spacy"):
        pytest.importorskip(module, reason=f"the GPT-1 BPE encoder needs {module} "
                            "(pip install 'bert_tf[gpt]'); it is not installed here")
    from bert_tf.pretraining_data.gpt_lm import EncoderSpec
    return EncoderSpec(encoder_path=str(encoders[0]), bpe_path=str(merges[0]))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> pathlib.Path:
    from bert_tf.corpora import write_pydoc_corpus
    path = tmp_path_factory.mktemp("corpus") / "pydoc.txt"
    write_pydoc_corpus(str(path))
    return path


@pytest.fixture(scope="module")
def encoder(bpe_spec):
    return bpe_spec.build()


def _documents(corpus: pathlib.Path) -> list[list[str]]:
    """The corpus's documents, read independently of the library's reader."""
    text = corpus.read_text(encoding="utf-8")
    return [[ln.strip() for ln in block.split("\n") if ln.strip()]
            for block in text.split("\n\n") if block.strip()]


def _windows(path: str) -> list[list[int]]:
    return [parse_example(r)["input_ids"] for r in read_tfrecord(path)]


def _shards(prefix: pathlib.Path) -> list[str]:
    return sorted(glob.glob(f"{prefix}-[0-9][0-9][0-9][0-9][0-9].tfrecord"))


def _run(corpus, out, spec, **kwargs):
    from bert_tf.pretraining_data.gpt_lm import LmDataOptions, create_gpt_lm_data
    option_names = {"n_ctx", "random_seed", "held_out_fraction", "document_separator",
                    "docs_per_shard"}
    options = LmDataOptions(**{"n_ctx": N_CTX, "docs_per_shard": DOCS_PER_SHARD,
                               **{k: v for k, v in kwargs.items() if k in option_names}})
    rest = {k: v for k, v in kwargs.items() if k not in option_names}
    return create_gpt_lm_data(str(corpus), str(out), spec, options, progress=False, **rest)


@pytest.mark.gpt_fixtures
def test_windows_reassemble_the_token_stream_exactly(tmp_path, corpus, bpe_spec, encoder):
    prefix = tmp_path / "lm"
    summary = _run(corpus, prefix, bpe_spec)
    documents = _documents(corpus)
    separator = encoder.encoder["\n</w>"]
    shards = _shards(prefix)
    assert len(shards) == summary["shards"] > 1
    position = 0
    total_windows = 0
    for path in shards:
        stats = json.loads(pathlib.Path(path + ".json").read_text())
        shard_docs = documents[position:position + stats["raw_documents"]]
        position += stats["raw_documents"]
        stream = []
        for doc in shard_docs:  # each line encoded alone, lines concatenated, then a separator
            for ids in encoder.encode(doc, verbose=False):
                stream.extend(ids)
            stream.append(separator)
        windows = _windows(path)
        assert all(len(w) == N_CTX for w in windows)
        flat = [i for w in windows for i in w]
        assert flat == stream[:len(flat)], path
        assert len(stream) - len(flat) == stats["stats"]["tail_tokens_dropped"] < N_CTX
        total_windows += len(windows)
    assert position == len(documents)  # every document went into exactly one shard
    assert summary["train"]["windows"] == total_windows
    assert summary["train"]["documents"] == len(documents)


@pytest.mark.long
@pytest.mark.gpt_fixtures
def test_deterministic_for_a_seed_whatever_the_workers(tmp_path, corpus, bpe_spec):
    a = _run(corpus, tmp_path / "a" / "lm", bpe_spec, held_out_fraction=0.2, random_seed=7)
    b = _run(corpus, tmp_path / "b" / "lm", bpe_spec, held_out_fraction=0.2, random_seed=7,
             num_workers=2)
    c = _run(corpus, tmp_path / "c" / "lm", bpe_spec, held_out_fraction=0.2, random_seed=8)
    assert a["heldout"]["documents"] > 0 and a["train"]["documents"] > 0
    for pattern in ("lm-*.tfrecord", "lm_heldout-*.tfrecord"):
        files_a = sorted((tmp_path / "a").glob(pattern))
        files_b = sorted((tmp_path / "b").glob(pattern))
        assert [f.name for f in files_a] == [f.name for f in files_b]
        assert [f.read_bytes() for f in files_a] == [f.read_bytes() for f in files_b]
    # Another seed draws another held-out split; no document is in both splits.
    assert sorted((tmp_path / "a").glob("lm_heldout-*.tfrecord")) and \
        [f.read_bytes() for f in sorted((tmp_path / "a").glob("lm_heldout-*.tfrecord"))] != \
        [f.read_bytes() for f in sorted((tmp_path / "c").glob("lm_heldout-*.tfrecord"))]
    assert a["train"]["documents"] + a["heldout"]["documents"] == len(_documents(corpus))
    assert c["train"]["documents"] + c["heldout"]["documents"] == len(_documents(corpus))


@pytest.mark.long
@pytest.mark.gpt_fixtures
def test_resumes_after_a_kill_with_identical_output(tmp_path, corpus, bpe_spec):
    clean = tmp_path / "clean" / "lm"
    _run(corpus, clean, bpe_spec)
    killed = tmp_path / "killed" / "lm"
    code = (
        "import sys; from bert_tf.pretraining_data.gpt_lm import EncoderSpec, LmDataOptions, "
        "create_gpt_lm_data\n"
        f"create_gpt_lm_data({str(corpus)!r}, {str(killed)!r}, EncoderSpec("
        f"encoder_path={bpe_spec.encoder_path!r}, bpe_path={bpe_spec.bpe_path!r}), "
        f"LmDataOptions(n_ctx={N_CTX}, docs_per_shard={DOCS_PER_SHARD}), progress=False, "
        "_crash_in_shard=1)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    names = sorted(os.listdir(killed.parent))
    assert "lm-00000.tfrecord" in names and "lm-00001.tfrecord" not in names
    assert any(n.startswith(".lm-00001.tfrecord.tmp-") for n in names)  # the killed write
    summary = _run(corpus, killed, bpe_spec)
    assert summary["shards_skipped"] == 1 and summary["shards_written"] == summary["shards"] - 1
    leftovers = [n for n in os.listdir(killed.parent) if ".tmp-" in n]
    assert not leftovers
    assert [pathlib.Path(p).read_bytes() for p in _shards(clean)] == \
        [pathlib.Path(p).read_bytes() for p in _shards(killed)]
    # Other settings under the same prefix are refused (nothing is silently overwritten).
    with pytest.raises(UserInputError, match="other settings"):
        _run(corpus, killed, bpe_spec, n_ctx=N_CTX * 2)


@pytest.mark.gpt_fixtures
def test_reader_gives_windows_ready_for_training(tmp_path, corpus, bpe_spec):
    import tensorflow as tf
    from bert_tf.pretraining_data.gpt_lm import encode_lm_example, lm_dataset
    prefix = tmp_path / "lm"
    _run(corpus, prefix, bpe_spec, held_out_fraction=0.1)
    files = _shards(prefix)
    expected = [w for path in files for w in _windows(path)]
    evaluation = list(lm_dataset(str(prefix) + "-*.tfrecord", N_CTX, is_training=False))
    assert [e["input_ids"].numpy().tolist() for e in evaluation] == expected
    assert evaluation[0]["input_ids"].dtype == tf.int32
    batches = lm_dataset(str(prefix) + "-*.tfrecord", N_CTX, batch_size=8, seed=1)
    batch = next(iter(batches))
    assert batch["input_ids"].shape == (8, N_CTX)
    held = list(lm_dataset(str(prefix) + "_heldout-*.tfrecord", N_CTX, is_training=False))
    assert held and all(e["input_ids"].shape == (N_CTX,) for e in held)
    with pytest.raises(UserInputError, match=f"windows have {N_CTX} tokens.*n_ctx=32"):
        lm_dataset(str(prefix) + "-*.tfrecord", 32)
    ids = expected[0]
    reference = tf.train.Example(features=tf.train.Features(feature={
        "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids))}))
    assert encode_lm_example(ids) == reference.SerializeToString()


@pytest.mark.gpt_fixtures
def test_bad_input_one_clear_error(tmp_path, corpus, bpe_spec):
    from bert_tf.pretraining_data.gpt_lm import EncoderSpec
    with pytest.raises(UserInputError, match="either --encoder_path and --bpe_path"):
        _run(corpus, tmp_path / "x", EncoderSpec(encoder_path=bpe_spec.encoder_path,
                                                 bpe_path=bpe_spec.bpe_path,
                                                 vocab_file=bpe_spec.encoder_path))
    with pytest.raises(UserInputError, match=r"--bpe_path=.*nope.bpe: file not found"):
        _run(corpus, tmp_path / "x", EncoderSpec(encoder_path=bpe_spec.encoder_path,
                                                 bpe_path=str(tmp_path / "nope.bpe")))
    with pytest.raises(UserInputError, match="--document_separator='_start_'"):
        _run(corpus, tmp_path / "x", bpe_spec, document_separator="_start_")
    with pytest.raises(UserInputError, match="--n_ctx=1 must be >= 2"):
        _run(corpus, tmp_path / "x", bpe_spec, n_ctx=1)
    assert not (tmp_path / "x-00000.tfrecord").exists()


@pytest.mark.long
def test_wordpiece_vocabulary_and_the_tool(tmp_path, corpus):
    """The BERT-vocabulary path through the real command-line tool (no ftfy/spaCy needed)."""
    from bert_tf.tokenization.gpt_text_encoder import WordPieceTextEncoder
    words = sorted({w for doc in _documents(corpus)[:3] for line in doc
                    for w in line.lower().replace(".", " ").split() if w.isalpha()})
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "."] + words) + "\n",
                     encoding="utf-8")
    out = tmp_path / "out" / "ltr"
    proc = subprocess.run(
        [sys.executable, "tools/create_gpt_lm_data.py", f"--input_file={corpus}",
         f"--output_file={out}", f"--vocab_file={vocab}", "--n_ctx=32", "--docs_per_shard=1000"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    encoder = WordPieceTextEncoder(vocab, do_lower_case=True)
    stream = []
    for doc in _documents(corpus):
        for ids in encoder.encode(doc, verbose=False):
            stream.extend(ids)
        stream.append(encoder.encoder["[SEP]"])
    flat = [i for w in _windows(str(out) + "-00000.tfrecord") for i in w]
    assert len(flat) == len(stream) // 32 * 32 and flat == stream[:len(flat)]
    proc = subprocess.run(
        [sys.executable, "tools/create_gpt_lm_data.py", f"--input_file={corpus}",
         f"--output_file={out}", f"--vocab_file={tmp_path / 'missing.txt'}"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode != 0
    assert "error: --vocab_file=" in proc.stderr and "file not found" in proc.stderr
    assert "Traceback" not in proc.stderr
