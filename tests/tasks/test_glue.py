"""GLUE / XNLI / IMDb processors on hand-written files in each task's published layout, on the
real GLUE files when ../shared is present, packing as the original, and bad-input errors."""
from __future__ import annotations

import gzip
import pathlib

import pytest

from bert_tf.tasks import glue

BOM = "\ufeff"

# task -> {file: content}: two rows per split in the task's GLUE tsv layout.
SAMPLES = {
    "cola": {
        "train.tsv": "gj04\t1\t\tOur friends won't buy this analysis.\n"
                     "gj04\t0\t*\tThey drank the pub.\n",
        "dev.tsv": "gj04\t1\t\tThe sailors rode the breeze.\n"
                   "cj99\t0\t*\tThe more you eat the less.\n",
        "test.tsv": "index\tsentence\n0\tBill whistled past the house.\n1\tThe car honked.\n",
    },
    "sst-2": {
        "train.tsv": "sentence\tlabel\nhide new secretions \t0\na charming journey \t1\n",
        "dev.tsv": "sentence\tlabel\nunflinchingly bleak \t0\nit 's a charming film \t1\n",
        "test.tsv": "index\tsentence\n0\tuneasy mishmash .\n1\ta gem .\n",
    },
    "mrpc": {
        "train.tsv": BOM + "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                     "1\t702876\t702977\tAmrozi accused his brother .\tHe accused his brother .\n"
                     "0\t2108705\t2108831\tYucaipa owned Dominick 's .\tYucaipa bought it .\n",
        "dev.tsv": BOM + "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                   "1\t1\t2\tHe said the pie .\tThe pie .\n0\t3\t4\tMagnarelli said .\tHis wife .\n",
        "test.tsv": BOM + "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                    "0\t1089874\t1089925\tPCCW 's chief .\tCurrent chief .\n"
                    "1\t3019446\t3019327\tThe two automakers .\tDomestic sales .\n",
    },
    "sts-b": {
        "train.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
                     "sentence2\tscore\n"
                     "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off."
                     "\tAn air plane is taking off.\t5.000\n"
                     "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man plays a flute."
                     "\tA man is eating.\t0.500\n",
        "dev.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
                   "sentence2\tscore\n"
                   "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man dances.\t"
                   "A man is dancing.\t4.750\n"
                   "1\tmain-captions\tMSRvid\t2012test\t0002\tnone\tnone\tA child rides.\t"
                   "A cat sleeps.\t0.000\n",
        "test.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
                    "sentence2\n"
                    "0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\tA girl styles hair.\t"
                    "A girl brushes hair.\n"
                    "1\tmain-captions\tMSRvid\t2012test\t0033\tnone\tnone\tMen play soccer.\t"
                    "Boys play soccer.\n",
    },
    "qqp": {
        "train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                     "133273\t213221\t213222\tHow is the life of a math student?\t"
                     "Which is the best?\t0\n"
                     "402555\t536040\t536041\tHow do I control my horny emotions?\t"
                     "How do you control your horniness?\t1\n",
        "dev.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                   "1\t2\t3\tWhy are there bugs?\tWhy do bugs exist?\t1\n"
                   "4\t5\t6\tWhat is AI?\tHow do I cook?\t0\n",
        "test.tsv": "id\tquestion1\tquestion2\n0\tWould the idea work?\tIs it a good idea?\n"
                    "1\tWhat is X?\tWhat is Y?\n",
    },
    "mnli": {
        "train.tsv": "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\t"
                     "label1\tgold_label\n"
                     "0\t31193\t31193n\tgovernment\t(\t(\t(\t(\tConceptually cream skimming has "
                     "two dimensions.\tProduct and geography are what make it work.\tneutral\t"
                     "neutral\n"
                     "1\t101457\t101457e\ttelephone\t(\t(\t(\t(\tyou know during the season\t"
                     "You lose the things.\tentailment\tentailment\n",
        "dev_matched.tsv": "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\t"
                           "sentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
                           "0\t63735\t63735n\tslate\t(\t(\t(\t(\tThe new rights are nice.\t"
                           "Everyone loves them.\tneutral\tentailment\tneutral\tneutral\tneutral"
                           "\tneutral\n"
                           "1\t91383\t91383c\tgovernment\t(\t(\t(\t(\tThis site includes a list."
                           "\tThe site has nothing.\tcontradiction\tcontradiction\tcontradiction"
                           "\tcontradiction\tcontradiction\tcontradiction\n",
        "dev_mismatched.tsv": "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\t"
                              "sentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
                              "0\t75290\t75290c\tletters\t(\t(\t(\t(\tYour contribution helped."
                              "\tYour contributions were of no help.\tcontradiction\t"
                              "contradiction\tcontradiction\tcontradiction\tcontradiction\t"
                              "contradiction\n"
                              "1\t133794\t133794c\tverbatim\t(\t(\t(\t(\tThe answer is yes.\t"
                              "The answer is yes indeed.\tentailment\tentailment\tentailment\t"
                              "entailment\tentailment\tentailment\n",
        "test_matched.tsv": "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\t"
                            "sentence2\n0\t31493\t31493\ttravel\t(\t(\t(\t(\tHierbas is a "
                            "liquor.\tIt is made of herbs.\n"
                            "1\t92164\t92164\tgovernment\t(\t(\t(\t(\tThe report was late.\t"
                            "It came early.\n",
        "test_mismatched.tsv": "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1"
                               "\tsentence2\n0\t1\t1n\tnineeleven\t(\t(\t(\t(\tWhat have you "
                               "decided?\tNothing.\n",
    },
    "qnli": {
        "train.tsv": "index\tquestion\tsentence\tlabel\n"
                     "0\tWhen did it start?\tIt started in 1990.\tentailment\n"
                     "1\tWho is he?\tThe sky is blue.\tnot_entailment\n",
        "dev.tsv": "index\tquestion\tsentence\tlabel\n"
                   "0\tWhat came first?\tThe egg came first.\tentailment\n"
                   "1\tWhere is it?\tNobody knows why.\tnot_entailment\n",
        "test.tsv": "index\tquestion\tsentence\n0\tWhat is it?\tIt is a cat.\n",
    },
    "rte": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n"
                     "0\tNo weapons were found.\tWeapons were found.\tnot_entailment\n"
                     "1\tA place of sorrow became a place of joy.\tPeople gathered.\tentailment\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n"
                   "0\tDana Reeve died.\tChristopher Reeve had an accident.\tnot_entailment\n"
                   "1\tBacteria mutate fast.\tBacteria evolve.\tentailment\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tMangla was summoned.\tShukla is related.\n",
    },
    "wnli": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n"
                     "0\tI stuck a pin through a carrot.\tThe carrot had a hole.\t1\n"
                     "1\tJohn could not see the stage.\tThe stage is so short.\t0\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n"
                   "0\tThe drain is clogged with hair.\tThe hair has to be cleaned.\t0\n"
                   "1\tJane knocked on Susan's door.\tSusan did not answer.\t1\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tMaude and Dora saw trains.\tThey saw.\n",
    },
    "xnli": {
        "multinli/multinli.train.zh.tsv": "premise\thypo\tlabel\n"
                                          "从 概念 上 看\t产品 和 地理\tneutral\n"
                                          "你 知道 在 这个 季节\t你 失去 了 东西\tcontradictory\n",
        "xnli.dev.tsv": "language\tgold_label\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\tx\n"
                        "en\tneutral\t(\t(\t(\t(\tHe said.\tHe spoke.\tx\n"
                        "zh\tentailment\t(\t(\t(\t(\t他 说\t他 讲\tx\n"
                        "zh\tcontradiction\t(\t(\t(\t(\t我 去\t我 没 去\tx\n",
    },
    "imdb": {
        "train.tsv": "file\trating\tlabel\ttext\n"
                     "train/pos/0_9.txt\t9\t1\tBromwell High is a cartoon comedy.\n"
                     "train/neg/1_2.txt\t2\t0\tStory of a man who has unnatural feelings.\n",
        "dev.tsv": "file\trating\tlabel\ttext\n"
                   "train/pos/5_8.txt\t8\t1\tGreat film.\ntrain/neg/6_1.txt\t1\t0\tAwful.\n",
    },
}

# task -> (train texts of row 0, train label of row 0, dev label of row 1, test texts of row 0)
EXPECTED = {
    "cola": (("Our friends won't buy this analysis.", None), "1", "0",
             ("Bill whistled past the house.", None)),
    "sst-2": (("hide new secretions ", None), "0", "1", ("uneasy mishmash .", None)),
    "mrpc": (("Amrozi accused his brother .", "He accused his brother ."), "1", "0",
             ("PCCW 's chief .", "Current chief .")),
    "sts-b": (("A plane is taking off.", "An air plane is taking off."), 5.0, 0.0,
              ("A girl styles hair.", "A girl brushes hair.")),
    "qqp": (("How is the life of a math student?", "Which is the best?"), "0", "0",
            ("Would the idea work?", "Is it a good idea?")),
    "mnli": (("Conceptually cream skimming has two dimensions.",
              "Product and geography are what make it work."), "neutral", "contradiction",
             ("Hierbas is a liquor.", "It is made of herbs.")),
    "qnli": (("When did it start?", "It started in 1990."), "entailment", "not_entailment",
             ("What is it?", "It is a cat.")),
    "rte": (("No weapons were found.", "Weapons were found."), "not_entailment", "entailment",
            ("Mangla was summoned.", "Shukla is related.")),
    "wnli": (("I stuck a pin through a carrot.", "The carrot had a hole."), "1", "1",
             ("Maude and Dora saw trains.", "They saw.")),
    "xnli": (("从 概念 上 看", "产品 和 地理"), "neutral", "contradiction", None),
    "imdb": (("Bromwell High is a cartoon comedy.", None), "1", "0", None),
}


def write_task(root: pathlib.Path, task: str) -> pathlib.Path:
    for name, content in SAMPLES[task].items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return root


@pytest.mark.parametrize("task", sorted(SAMPLES))
def test_processor_reads_every_split(tmp_path, task):
    processor = glue.get_processor(task)
    data_dir = str(write_task(tmp_path, task))
    train = processor.get_train_examples(data_dir)
    (text_a, text_b), train_label, dev_label, test_texts = EXPECTED[task]
    assert len(train) == 2
    assert (train[0].text_a, train[0].text_b, train[0].label) == (text_a, text_b, train_label)
    assert train[0].guid == "train-0"
    dev = processor.get_dev_splits(data_dir)
    assert len(dev[0].examples) == 2 and dev[0].examples[1].label == dev_label
    if task == "mnli":
        assert [s.name for s in dev] == ["dev_matched", "dev_mismatched"]
        assert dev[1].examples[1].label == "entailment"
    if test_texts is None:
        return
    test = processor.get_test_splits(data_dir)
    first = test[0].examples[0]
    assert (first.text_a, first.text_b, first.label) == (*test_texts, None)
    assert first.index == "0"
    assert test[0].leaderboard_name == processor.leaderboard_name
    if task == "mnli":
        assert [(s.name, s.leaderboard_name) for s in test] == [
            ("test_matched", "MNLI-m"), ("test_mismatched", "MNLI-mm")]


def test_task_names_and_label_sets():
    assert glue.task_names() == ["cola", "imdb", "mnli", "mrpc", "qnli", "qqp", "rte", "sst-2",
                                 "sts-b", "wnli", "xnli"]
    assert glue.get_processor("STSB").is_regression
    assert glue.get_processor("SST2").name == "sst-2"
    assert glue.get_processor("MNLI").labels == ["contradiction", "entailment", "neutral"]
    assert glue.get_processor("xnli", "de").language == "de"
    with pytest.raises(ValueError, match="Task not found: 'squad'.*cola"):
        glue.get_processor("squad")


def test_xnli_keeps_the_language_and_maps_contradictory(tmp_path):
    processor = glue.get_processor("xnli")
    data_dir = str(write_task(tmp_path, "xnli"))
    assert processor.get_train_examples(data_dir)[1].label == "contradiction"
    dev = processor.get_dev_splits(data_dir)[0].examples
    assert [(e.text_a, e.label) for e in dev] == [("他 说", "entailment"),
                                                  ("我 去", "contradiction")]


def test_imdb_gzip_and_held_out_dev(tmp_path):
    rows = "".join(f"train/{'pos' if i % 2 else 'neg'}/{i}_5.txt\t5\t{i % 2}\treview {i}\n"
                   for i in range(200))
    with gzip.open(tmp_path / "train.tsv.gz", "wt", encoding="utf-8") as f:
        f.write("file\trating\tlabel\ttext\n" + rows)
    processor = glue.get_processor("imdb")
    train = processor.get_train_examples(str(tmp_path))
    dev = processor.get_dev_splits(str(tmp_path))[0].examples
    assert len(train) + len(dev) == 200 and 5 < len(dev) < 40  # about 10 %
    assert not {e.index for e in train} & {e.index for e in dev}
    assert all(glue.imdb_is_heldout(e.index) for e in dev)
    # The split depends on the file name only: the same reviews in another order, same dev set.
    shuffled = "".join(reversed(rows.splitlines(True)))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "train.tsv").write_text("file\trating\tlabel\ttext\n" + shuffled,
                                              encoding="utf-8")
    dev_b = processor.get_dev_splits(str(tmp_path / "b"))[0].examples
    assert sorted(e.index for e in dev_b) == sorted(e.index for e in dev)
    # An explicit dev file replaces the held-out split (and training keeps every review).
    (tmp_path / "mydev.tsv").write_text(SAMPLES["imdb"]["dev.tsv"], encoding="utf-8")
    assert len(processor.get_train_examples(str(tmp_path), str(tmp_path / "mydev.tsv"))) == 200
    assert len(processor.get_dev_splits(str(tmp_path), str(tmp_path / "mydev.tsv"))[0]
               .examples) == 2


def test_bad_input_names_file_and_line(tmp_path):
    write_task(tmp_path, "rte")
    path = tmp_path / "train.tsv"
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tonly one\n",
                    encoding="utf-8")
    processor = glue.get_processor("rte")
    with pytest.raises(glue.GlueDataError, match=r"train\.tsv:3: 2 tab-separated column\(s\), "
                                                 r"expected at least 4"):
        processor.get_train_examples(str(tmp_path))
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailed\n", encoding="utf-8")
    with pytest.raises(glue.GlueDataError, match=r"train\.tsv:2: label 'entailed' is not one of "
                                                 r"\['entailment', 'not_entailment'\]"):
        processor.get_train_examples(str(tmp_path))
    write_task(tmp_path, "sts-b")
    sts = (tmp_path / "dev.tsv")
    sts.write_text(SAMPLES["sts-b"]["dev.tsv"].replace("4.750", "high"), encoding="utf-8")
    with pytest.raises(glue.GlueDataError, match=r"dev\.tsv:2: label 'high' is not a number"):
        glue.get_processor("sts-b").get_dev_splits(str(tmp_path))
    with pytest.raises(glue.GlueDataError, match="none of dev_matched.tsv found"):
        glue.get_processor("mnli").get_dev_splits(str(tmp_path))


class _Tokenizer:
    """Whitespace tokenizer over a tiny vocab (packing is what is tested here)."""

    def __init__(self, words):
        self.vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}

    def tokenize(self, text):
        return text.split()


def test_features_packed_as_the_original_and_truncation_counted(caplog):
    tokenizer = _Tokenizer("a b c d e f g h".split())
    examples = [glue.InputExample("t-0", "a b c d e", "f g", "1"),
                glue.InputExample("t-1", "a b", None, "0")]
    features = glue.convert_examples_to_features(examples, ["0", "1"], 8, tokenizer, "train")
    v = tokenizer.vocab
    # pair: 8 - 3 = 5 tokens, the longer (A) is cut first: a b c | f g
    assert features[0].input_ids == [v[t] for t in "[CLS] a b c [SEP] f g [SEP]".split()]
    assert features[0].segment_ids == [0, 0, 0, 0, 0, 1, 1, 1]
    assert features[0].label_id == 1 and features[0].truncated
    assert features[1].input_ids == [v["[CLS]"], v["a"], v["b"], v["[SEP]"], 0, 0, 0, 0]
    assert features[1].input_mask == [1, 1, 1, 1, 0, 0, 0, 0]
    assert not features[1].truncated
    arrays = glue.features_to_arrays(features, regression=False)
    assert arrays["input_word_ids"].shape == (2, 8) and arrays["label_ids"].tolist() == [1, 0]
    reg = glue.features_to_arrays(glue.convert_examples_to_features(
        [glue.InputExample("t", "a", "b", 3.25)], None, 8, tokenizer), regression=True)
    assert reg["label_ids"].dtype.name == "float32" and reg["label_ids"][0] == 3.25


REAL_COUNTS = {"CoLA": ("cola", 8551, 1043, 1063), "MRPC": ("mrpc", 3668, 408, 1725),
               "RTE": ("rte", 2490, 277, 3000), "SST-2": ("sst-2", 67349, 872, 1821),
               "STS-B": ("sts-b", 5749, 1500, 1379), "WNLI": ("wnli", 635, 71, 146)}


@pytest.mark.parametrize("folder", sorted(REAL_COUNTS))
def test_real_glue_files(shared_data, folder):
    data_dir = shared_data / "glue" / folder
    if not data_dir.exists():
        pytest.skip(f"{data_dir} is absent")
    task, n_train, n_dev, n_test = REAL_COUNTS[folder]
    processor = glue.get_processor(task)
    train = processor.get_train_examples(str(data_dir))
    dev = processor.get_dev_examples(str(data_dir))
    test = processor.get_test_examples(str(data_dir))
    assert (len(train), len(dev), len(test)) == (n_train, n_dev, n_test)
    assert all(e.label is not None for e in train + dev)
    assert all(e.label is None for e in test)
    assert test[0].index == "0" and test[-1].index == str(n_test - 1)


@pytest.mark.long
def test_real_imdb_file(shared_data):
    path = shared_data / "imdb" / "train.tsv.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    processor = glue.get_processor("imdb")
    train = processor.get_train_examples(str(path.parent))
    dev = processor.get_dev_splits(str(path.parent))[0].examples
    assert len(train) + len(dev) == 25000
    assert 2000 < len(dev) < 3000
    assert {e.label for e in dev} == {"0", "1"}
