"""Agreement of the in-graph GPT-1 BPE encoder with the Python encoder on ../shared/data.

  python bench/gpt_bpe_agreement.py [--mode=sample|full] [--out_dir=bench/results/gpt_bpe]
      [--datasets=imdb_train,glue,...] [--batch_size=128]

For every text of every data set: `TextEncoder.encode_text` (ftfy + text_standardize + spaCy +
BPE, the original's pipeline) against `InGraphBpeEncoder.encode` (built with
`from_text_encoder`, i.e. spaCy's own special-case table and no corpus), ids compared text by
text. Prints one JSON object: per data set `texts`, `identical`, `differing`, and for each
differing text its `category` (see `classify`), the first differing chunk and both token lists
there. Correctness only: no timing.

  * `--mode=sample`: 2,000 IMDb train reviews (seed 32), RTE and MRPC dev, 500 SQuAD v1.1
    questions and 200 contexts -- the quick measurement.
  * `--mode=full`: every text of every data set (`DATASETS`), `--part_size` texts at a time:
    one JSON file per part is written to `--out_dir` as it finishes; a rerun skips parts
    already written (resumable), and the summary is assembled from the files. On the shared
    2-core machine both encoders ran at roughly 400 short lines/s each (load average ~11).

Data sets (`iter_dataset`): IMDb train (25,000 reviews), every text field of every GLUE tsv
(CoLA, MRPC, RTE, SST-2, STS-B, WNLI train/dev/test, diagnostic), SQuAD v1.1 and v2.0 dev
questions and (distinct) contexts, the pretraining corpora (sample_text.txt and the 605,547
lines of imdb_unsup_corpus.txt.gz, one line per text), CoNLL-2003 sentences (tokens joined by
spaces). Without ../shared it prints `{"skipped": ...}` and exits 0.
"""
from __future__ import annotations

import csv
import gzip
import itertools
import hashlib
import json
import os
import pathlib
import random
import sys
from typing import Iterator

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED = pathlib.Path(os.environ.get("BERT_TF_SHARED", str(ROOT.parent / "shared")))
DATA = SHARED / "data"
BPE_DIR = pathlib.Path(os.environ.get("BERT_TF_GPT_FIXTURES",
                                      str(SHARED / "fixtures" / "original_gpt"))) / "bpe"

GLUE_FIELDS = ("sentence", "sentence1", "sentence2", "#1 String", "#2 String", "question")
DATASETS = ("imdb_train", "glue", "squad", "pretrain_sample", "pretrain_imdb_unsup", "conll2003")


def _tsv_rows(path: pathlib.Path) -> Iterator[list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        for line in f:
            yield line.rstrip("\r\n").split("\t")


def iter_glue() -> Iterator[str]:
    for path in sorted((DATA / "glue").glob("*/*.tsv")) + [DATA / "glue/diagnostic/diagnostic.tsv"]:
        if path.name == "dev_ids.tsv" or (path.parent.name == "diagnostic"
                                          and path.name != "diagnostic.tsv"):
            continue
        rows = _tsv_rows(path)
        if path.parent.name == "CoLA" and path.name != "test.tsv":
            for row in rows:  # no header: source, label, original label, sentence
                if len(row) > 3:
                    yield row[3]
            continue
        header = next(rows)
        cols = [i for i, h in enumerate(header) if h in GLUE_FIELDS]
        for row in rows:
            for i in cols:
                if i < len(row):
                    yield row[i]


def iter_squad() -> Iterator[str]:
    for name in ("dev-v1.1.json", "dev-v2.0.reconstructed.json"):
        with open(DATA / "squad" / name, encoding="utf-8") as f:
            data = json.load(f)["data"]
        for article in data:
            for para in article["paragraphs"]:
                yield para["context"]
                for qa in para["qas"]:
                    yield qa["question"]


def iter_imdb() -> Iterator[str]:
    with gzip.open(DATA / "imdb/train.tsv.gz", "rt", encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader)
        for row in reader:
            yield row[3]


def iter_lines(path: pathlib.Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.strip():
                yield line


def iter_conll() -> Iterator[str]:
    for name in ("eng.train", "eng.testa"):
        words: list[str] = []
        for line in (DATA / "conll2003" / name).read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if not parts or parts[0] == "-DOCSTART-":
                if words:
                    yield " ".join(words)
                words = []
            else:
                words.append(parts[0])
        if words:
            yield " ".join(words)


def iter_dataset(name: str) -> Iterator[str]:
    """Every text of one data set (see the module docstring)."""
    if name == "imdb_train":
        return iter_imdb()
    if name == "glue":
        return iter_glue()
    if name == "squad":
        return _distinct(iter_squad())
    if name == "pretrain_sample":
        return iter_lines(DATA / "pretrain/sample_text.txt")
    if name == "pretrain_imdb_unsup":
        return iter_lines(DATA / "pretrain/imdb_unsup_corpus.txt.gz")
    if name == "conll2003":
        return iter_conll()
    raise ValueError(f"unknown data set {name!r}; expected one of {DATASETS}")


def _distinct(texts: Iterator[str]) -> Iterator[str]:
    seen = set()
    for t in texts:
        if t not in seen:
            seen.add(t)
            yield t


def is_utf8(text: str) -> bool:
    """Whether a tf.string can hold `text` (a lone surrogate cannot be UTF-8 encoded)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_key(text: str) -> str:
    """The id of a text in the enumerated differences: sha1 of its UTF-8, 12 hex digits."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def sample_datasets() -> dict[str, list[str]]:
    imdb = list(iter_imdb())
    rng = random.Random(32)
    out = {"imdb_train_2000": rng.sample(imdb, 2000)}
    rte = [r for r in _tsv_rows(DATA / "glue/RTE/dev.tsv")][1:]
    out["rte_dev"] = [t for r in rte for t in r[1:3]]
    mrpc = [r for r in _tsv_rows(DATA / "glue/MRPC/dev.tsv")][1:]
    out["mrpc_dev"] = [t for r in mrpc for t in r[3:5]]
    squad = list(_distinct(iter_squad()))
    questions = [t for t in squad if len(t) < 300]
    contexts = [t for t in squad if len(t) >= 300]
    out["squad_q500_c200"] = rng.sample(questions, 500) + rng.sample(contexts, 200)
    return out


# -- classification of a differing text -----------------------------------------------------
def first_difference(text: str, python_encoder, in_graph) -> dict:
    """Where the two encoders part: the stage and, for the spaCy stage, the first chunk."""
    import tensorflow as tf
    from bert_tf.tokenization.gpt_text_encoder import text_standardize
    fixed_py = python_encoder._ftfy.fix_text(text)  # pylint: disable=protected-access
    fixed_ig = in_graph.fix_text(tf.constant([text])).numpy()[0].decode("utf-8")
    if fixed_py != fixed_ig:
        mojibake = python_encoder._ftfy.fix_encoding(text) != text  # pylint: disable=protected-access
        return {"stage": "ftfy", "python": fixed_py[:200], "in_graph": fixed_ig[:200],
                "category": "mojibake repair (ftfy.fix_encoding)" if mojibake else "other"}
    standardized = text_standardize(fixed_py)
    doc = python_encoder.nlp(standardized)
    chunks = [c for c in standardized.split(" ") if c]
    # the chunks of one text: the special-case matcher runs over all of them, as spaCy's
    got = in_graph.split_chunks(tf.constant(chunks),
                                tf.zeros([len(chunks)], tf.int64)).to_list()
    # spaCy's tokens per chunk, from token offsets.
    starts, pos = [], 0
    for c in standardized.split(" "):
        if c:
            starts.append(pos)
        pos += len(c) + 1
    by_chunk: list[list[str]] = [[] for _ in chunks]
    import bisect
    for tok in doc:
        i = bisect.bisect_right(starts, tok.idx) - 1
        by_chunk[i].append(tok.text)
    for chunk, want, have in zip(chunks, by_chunk, got):
        have = [h.decode("utf-8") for h in have]
        if chunk == "\n":
            continue
        if want != have:
            alone = [t.text for t in python_encoder.nlp(chunk)]
            category = ("special-case matcher span across chunks" if alone == have
                        else classify(chunk, want, have))
            return {"stage": "spacy", "chunk": chunk, "python": want, "in_graph": have,
                    "category": category}
    return {"stage": "bpe/lower"}


def classify(chunk: str, python_tokens: list[str], in_graph_tokens: list[str]) -> str:
    """A coarse category name for a chunk the two tokenizers split differently."""
    if "://" in chunk or chunk.lower().startswith("www.") or ".com" in chunk.lower():
        return "url"
    if any(t.endswith(".") and len(t) > 1 for t in python_tokens) and \
            any(t == "." for t in in_graph_tokens):
        return "abbreviation / special case with a period"
    if any("'" in t or "’" in t for t in python_tokens + in_graph_tokens):
        return "apostrophe / clitic"
    return "other affix/infix"


def measure(texts: list[str], python_encoder, in_graph, batch_size: int) -> dict:
    import tensorflow as tf
    encode = tf.function(in_graph.encode, input_signature=[tf.TensorSpec([None], tf.string)])
    usable = [t for t in texts if is_utf8(t)]
    unencodable = len(texts) - len(usable)
    differing = []
    for start in range(0, len(usable), batch_size):
        batch = usable[start:start + batch_size]
        got = encode(tf.constant(batch)).to_list()
        for text, ids in zip(batch, got):
            if ids != python_encoder.encode_text(text):
                diff = first_difference(text, python_encoder, in_graph)
                diff["key"] = text_key(text)
                diff["text"] = text[:300]
                differing.append(diff)
    categories: dict[str, int] = {}
    for d in differing:
        key = d["stage"] + (": " + d["category"] if "category" in d else "")
        categories[key] = categories.get(key, 0) + 1
    return {"texts": len(texts), "identical": len(usable) - len(differing),
            "differing": len(differing) + unencodable, "not_utf8": unencodable,
            "categories": categories, "cases": differing}


def measure_in_parts(name: str, out_dir: pathlib.Path, python_encoder, in_graph,
                     batch_size: int, part_size: int) -> dict:
    """`measure` over one data set, `part_size` texts at a time, each part written to
    `out_dir/<name>.partNNN.json` as it finishes (a rerun skips written parts); the merged
    result."""
    parts = []
    texts = iter_dataset(name)
    for k in itertools.count():
        chunk = list(itertools.islice(texts, part_size))
        if not chunk:
            break
        path = out_dir / f"{name}.part{k:03d}.json"
        if not path.exists():
            result = measure(chunk, python_encoder, in_graph, batch_size)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")
            tmp.replace(path)
            print(f"{name} part {k}: {result['identical']}/{result['texts']} identical",
                  file=sys.stderr, flush=True)
        parts.append(json.loads(path.read_text(encoding="utf-8")))
    merged = {"texts": 0, "identical": 0, "differing": 0, "not_utf8": 0, "categories": {},
              "cases": []}
    for part in parts:
        for key in ("texts", "identical", "differing", "not_utf8"):
            merged[key] += part[key]
        for cat, count in part["categories"].items():
            merged["categories"][cat] = merged["categories"].get(cat, 0) + count
        merged["cases"].extend(part["cases"])
    return merged


def build_encoders():
    from bert_tf.tokenization.gpt_bpe_in_graph import InGraphBpeEncoder
    from bert_tf.tokenization.gpt_text_encoder import TextEncoder
    encoder_path = BPE_DIR / "encoder_bpe_40000.json"
    bpe_path = BPE_DIR / "vocab_40000.bpe"
    python_encoder = TextEncoder(encoder_path, bpe_path)
    in_graph = InGraphBpeEncoder.from_text_encoder(encoder_path, bpe_path,
                                                   text_encoder=TextEncoder(encoder_path, bpe_path))
    return python_encoder, in_graph


def main(argv: list[str]) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("sample", "full"), default="sample")
    parser.add_argument("--out_dir", default=str(ROOT / "bench/results/gpt_bpe"))
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--part_size", type=int, default=50000,
                        help="--mode=full: texts per part file (the unit of resumption)")
    parser.add_argument("--max_cases", type=int, default=50,
                        help="differing cases printed per data set (all are in --out_dir)")
    args = parser.parse_args(argv)
    if not DATA.is_dir() or not BPE_DIR.is_dir():
        print(json.dumps({"skipped": f"needs {DATA} and {BPE_DIR}"}))
        return 0
    python_encoder, in_graph = build_encoders()
    summary = {}
    if args.mode == "sample":
        for name, texts in sample_datasets().items():
            summary[name] = measure(texts, python_encoder, in_graph, args.batch_size)
    else:
        out_dir = pathlib.Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in args.datasets.split(","):
            summary[name] = measure_in_parts(name, out_dir, python_encoder, in_graph,
                                             args.batch_size, args.part_size)
    for result in summary.values():
        result["cases"] = result["cases"][:args.max_cases]
    print(json.dumps(summary, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
