"""Named-entity recognition (CoNLL-2003, or your own CoNLL-format files and tag set) with BERT: reading the column files, WordPiece features with
first-sub-token labels, the masked token loss, mapping predictions back to words, and the conlleval
files and scores.

Data flow: `read_conll_file` (one `NerSentence` per sentence: words, tags, line numbers) →
`convert_sentences_to_features` (`[CLS] sub-tokens [SEP]` windows; the first sub-token of each
word carries the word's label, every other position is ignored with `IGNORE_LABEL`) →
`BertTokenClassifier` (or the feature-based tagger of `bert_tf.tasks.feature_based`) →
`word_predictions` (one tag per word, read at its first sub-token) → `write_conlleval_file` and
`bert_tf.evaluation.conlleval` (entity-level precision / recall / F1). `run_ner` drives a whole
`tools/run_ner.py` invocation.

Decisions (the original release has no NER script; the paper, section 5.3, says that the first
sub-token's representation feeds the token classifier and that the input includes the maximal
document context the data provide):
  * Tags are used as the files have them (IOB1 for the raw CoNLL-2003 files); conlleval scores
    IOB1 and IOB2 alike. The label list (`training_label_list`) is the nine CoNLL-2003 tags
    (`CONLL2003_LABELS`) when the training file uses only those; a tag set of your own (no
    CoNLL-2003 entity tag) is the training file's tags, sorted; `--label_list` names the tags
    (or `train`: all of the file's, sorted). CoNLL-2003 tags mixed with others is an error (a
    typo such as `B-FOO`). The list is written to `label_list.txt` in the output directory and
    read back by later evaluation / prediction runs; a dev/test tag outside it is an error
    naming file and line.
  * By default the input is one sentence at a time. With `document_context` (the paper's
    "maximal document context"), the window around a sentence is filled with the WordPiece
    tokens of the sentences before and after it in the same `-DOCSTART-` document, the sentence
    in the middle; only the sentence's own words are labelled and predicted.
  * A sentence longer than `max_seq_length - 2` WordPiece tokens is split into windows that
    start every `doc_stride` sub-tokens (as SQuAD documents); every window is trained on, and
    each word is predicted from the window where its first sub-token has the most context
    (SQuAD's max-context rule). No word is ever dropped; the number of split sentences is
    logged.
  * A word that WordPiece turns into no token at all (e.g. only control characters) is fed as
    `[UNK]` so that it still gets a prediction.

Modules: `reading` (CoNLL files, labels), `features` (windows), `scoring` (loss, word predictions,
conlleval), `run` (`NerRunOptions`, `run_ner`). Their public names are importable from here.
"""
from bert_tf.tasks.ner.features import (NerFeature, convert_sentences_to_features,
                                        document_context_window, features_to_arrays,
                                        tokenize_words)
from bert_tf.tasks.ner.reading import (CONLL2003_LABELS, DOCSTART, IGNORE_LABEL, LABEL_LIST_FILE,
                                       LABEL_LIST_FROM_TRAIN, NerDataError, NerSentence,
                                       build_label_list, check_labels, parse_label_list,
                                       read_conll_file, read_label_list, training_label_list,
                                       write_label_list)
from bert_tf.tasks.ner.run import DATA_DIR_FILES, NerRunOptions, run_ner, validate_options
from bert_tf.tasks.ner.scoring import (ner_loss_fn, numpy_token_loss, score_predictions,
                                       token_classification_loss, word_predictions,
                                       write_conlleval_file)

__all__ = ["CONLL2003_LABELS", "DATA_DIR_FILES", "DOCSTART", "IGNORE_LABEL", "LABEL_LIST_FILE",
           "LABEL_LIST_FROM_TRAIN", "parse_label_list", "training_label_list",
           "NerDataError", "NerFeature", "NerRunOptions", "NerSentence", "build_label_list",
           "check_labels", "convert_sentences_to_features", "document_context_window",
           "features_to_arrays", "ner_loss_fn", "numpy_token_loss", "read_conll_file",
           "read_label_list", "run_ner", "score_predictions", "token_classification_loss",
           "tokenize_words", "validate_options", "word_predictions", "write_conlleval_file",
           "write_label_list"]
