"""The studies: declared grids of pretraining variants x fine-tuning tasks, with the papers'
own numbers, and the three scales they run at.

A `Study` lists `Variant`s (how the model was pretrained and how it is fine-tuned); every
variant of a study is pretrained and fine-tuned under the study's one budget (`Scale`: corpus,
model size, steps, batch, optimizer, seeds). A variant's pretraining is identified by
`Variant.pretraining_key` and its fine-tuning by `Variant.finetuning_key`, so variants that are
the same run in several studies (BERT Table 5's MLM+NSP is Table 8's 80/10/10) are run once.

Numbers in `paper` are the papers' dev-set scores (BERT: Devlin et al. 2019, Tables 5 and 8;
GPT-1: Radford et al. 2018, Table 5), keyed by the paper's column names.
"""
from __future__ import annotations

import dataclasses

from bert_tf.errors import UserInputError


class StudyError(UserInputError):
    """Unknown study or scale, missing task data, bad study flags."""


@dataclasses.dataclass(frozen=True)
class Variant:
    """One row of a study's table.

    Attributes:
      name: short id (file names, results.json).
      label: the row's name in the paper's table.
      model: "bert" (BertEncoder) or "gpt" (GptModel, left-to-right).
      pretrained: False = fine-tuned from random weights (no pretraining).
      objective: BERT's pretraining loss: "mlm+nsp" or "mlm" (single-segment data, no NSP).
      masking: (MASK, SAME, RND) probabilities of data generation (BERT Table 8).
      head: fine-tuning head: "default" (BertClassifier / GptClassifier) or "bilstm" (a randomly
        initialised BiLSTM over the frozen-architecture hidden states, BERT Table 5's LTR +
        BiLSTM; the transformer is fine-tuned too).
      lm_coef: GPT fine-tuning's auxiliary LM weight (GPT Table 5; 0 = no aux LM).
      paper: the paper's numbers for this row, {column: score}.
    """

    name: str
    label: str
    model: str = "bert"
    pretrained: bool = True
    objective: str = "mlm+nsp"
    masking: tuple[float, float, float] = (0.8, 0.1, 0.1)
    head: str = "default"
    lm_coef: float = 0.0
    paper: dict = dataclasses.field(default_factory=dict)

    @property
    def pretraining_key(self) -> str | None:
        """Folder name of the pretraining cell (None: no pretraining)."""
        if not self.pretrained:
            return None
        if self.model == "gpt":
            return "gpt-ltr"
        m = "_".join(f"{round(p * 100):d}" for p in self.masking)
        return f"bert-{self.objective.replace('+', '_')}-mask{m}"

    @property
    def finetuning_key(self) -> str:
        """Folder name of the fine-tuning cells (before task and seed)."""
        base = self.pretraining_key or f"{self.model}-scratch"
        if self.model == "gpt":
            base += f"-{self.head}-lm{self.lm_coef:g}"
        elif self.head != "default":
            base += f"-{self.head}"
        return base


@dataclasses.dataclass(frozen=True)
class Study:
    """A declared grid: `variants` x the scale's tasks.

    Attributes:
      name: --study value.
      title: heading of its table.
      paper_columns: the paper's table columns (in order); `Variant.paper` holds their values.
      metric_note: what the paper's numbers are.
      ordering_column: the paper column whose ranking of the variants is compared with ours
        when no paper column matches our task ("average": the mean over paper_columns).
    """

    name: str
    title: str
    variants: tuple[Variant, ...]
    paper_columns: tuple[str, ...]
    metric_note: str
    ordering_column: str = "average"


_T5 = ("MNLI-m", "QNLI", "MRPC", "SST-2", "SQuAD")
BERT_TABLE5 = Study(
    name="bert_pretraining_tasks",
    title="BERT Table 5: effect of the pre-training tasks",
    paper_columns=_T5,
    metric_note="BERT-Base dev: accuracy, SQuAD v1.1 F1",
    variants=(
        Variant("mlm_nsp", "BERT (MLM + NSP)", paper=dict(zip(_T5, (84.4, 88.4, 86.7, 92.7, 88.5)))),
        Variant("no_nsp", "No NSP (MLM only)", objective="mlm",
                paper=dict(zip(_T5, (83.9, 84.9, 86.5, 92.6, 87.9)))),
        Variant("ltr_no_nsp", "LTR & No NSP", model="gpt", lm_coef=0.0,
                paper=dict(zip(_T5, (82.1, 84.3, 77.5, 92.1, 77.8)))),
        Variant("ltr_bilstm", "+ BiLSTM", model="gpt", head="bilstm", lm_coef=0.0,
                paper=dict(zip(_T5, (82.1, 84.1, 75.7, 91.6, 84.9)))),
        Variant("no_pretraining", "No pre-training (BERT, random init)", pretrained=False),
    ))

_T8 = ("MNLI fine-tune", "NER fine-tune", "NER feature-based")
BERT_TABLE8 = Study(
    name="bert_masking",
    title="BERT Table 8: masking strategies (MASK / SAME / RND)",
    paper_columns=_T8,
    metric_note="BERT-Base dev: MNLI accuracy, CoNLL-2003 NER F1 (only fine-tuning is run here)",
    ordering_column="MNLI fine-tune",
    variants=tuple(
        Variant(f"mask{round(m * 100)}_{round(s * 100)}_{round(r * 100)}",
                f"{round(m * 100)}% / {round(s * 100)}% / {round(r * 100)}%",
                masking=(m, s, r), paper=dict(zip(_T8, paper)))
        for (m, s, r), paper in (
            ((0.8, 0.1, 0.1), (84.2, 95.4, 94.9)),
            ((1.0, 0.0, 0.0), (84.3, 94.9, 94.0)),
            ((0.8, 0.0, 0.2), (84.1, 95.2, 94.6)),
            ((0.8, 0.2, 0.0), (84.4, 95.2, 94.7)),
            ((0.0, 0.2, 0.8), (83.7, 94.8, 94.6)),
            ((0.0, 0.0, 1.0), (83.6, 94.9, 94.6)))))

_G5 = ("Avg", "CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE")
GPT_TABLE5 = Study(
    name="gpt_ablations",
    title="GPT-1 Table 5: auxiliary LM objective and pre-training",
    paper_columns=_G5,
    metric_note="GPT-1 dev: CoLA MCC, STS-B Pearson, MRPC/QQP F1-accuracy mean, others accuracy",
    ordering_column="Avg",
    variants=(
        Variant("aux_lm", "Transformer w/ aux LM (full)", model="gpt", lm_coef=0.5,
                paper=dict(zip(_G5, (74.7, 45.4, 91.3, 82.3, 82.0, 70.3, 81.8, 88.1, 56.0)))),
        Variant("no_pretraining", "Transformer w/o pre-training", model="gpt",
                pretrained=False, lm_coef=0.5,
                paper=dict(zip(_G5, (59.9, 18.9, 84.0, 79.4, 30.9, 65.5, 75.7, 71.2, 53.8)))),
        Variant("no_aux_lm", "Transformer w/o aux LM", model="gpt", lm_coef=0.0,
                paper=dict(zip(_G5, (75.0, 47.9, 92.0, 84.9, 83.2, 69.8, 81.1, 86.9, 54.4)))),
    ))

STUDIES: dict[str, Study] = {s.name: s for s in (BERT_TABLE5, BERT_TABLE8, GPT_TABLE5)}
"""The implemented studies (--list). Not implemented yet, hence not listed: BERT Table 6
(model size), Table 7 (feature-based NER), GPT-1 Figure 2, BERT vs GPT per epoch on IMDb."""


@dataclasses.dataclass(frozen=True)
class Scale:
    """One budget shared by every variant of a study.

    Attributes:
      name: --scale value.
      corpus: pretraining text ("embedded": the pydoc topics of the tiny topic task's training
        split; else a path relative to --data_dir's parent, create_pretraining_data's format).
      tasks: fine-tuning tasks ("topic": the embedded topic task; GLUE names: --data_dir/glue).
      vocab_size, num_layers, hidden_size, num_heads, max_seq_length: the models (BERT and GPT
        the same size).
      pretraining_steps, pretraining_batch, pretraining_lr: the pretraining budget (tokens seen
        = steps x batch x max_seq_length for every variant).
      finetuning_epochs, finetuning_batch, finetuning_lr: fine-tuning budget.
      dupe_factor: pretraining-data passes with new masks.
      max_train_examples: cap on fine-tuning training examples (0: all).
    """

    name: str
    corpus: str
    tasks: tuple[str, ...]
    vocab_size: int
    num_layers: int
    hidden_size: int
    num_heads: int
    max_seq_length: int
    pretraining_steps: int
    pretraining_batch: int
    pretraining_lr: float
    finetuning_epochs: float
    finetuning_batch: int
    finetuning_lr: float
    dupe_factor: int = 5
    max_train_examples: int = 0


SCALES: dict[str, Scale] = {
    "tiny": Scale("tiny", corpus="embedded", tasks=("topic",), vocab_size=2000, num_layers=2,
                  hidden_size=64, num_heads=2, max_seq_length=64, pretraining_steps=150,
                  pretraining_batch=32, pretraining_lr=1e-3, finetuning_epochs=10,
                  finetuning_batch=32, finetuning_lr=1e-3, dupe_factor=3),
    "small": Scale("small", corpus="pretrain/imdb_unsup_corpus.txt.gz",
                   tasks=("SST-2", "MRPC", "RTE"), vocab_size=8000, num_layers=4,
                   hidden_size=256, num_heads=4, max_seq_length=128, pretraining_steps=20000,
                   pretraining_batch=64, pretraining_lr=5e-4, finetuning_epochs=3,
                   finetuning_batch=32, finetuning_lr=1e-4, dupe_factor=5,
                   max_train_examples=20000),
    "base": Scale("base", corpus="pretrain/imdb_unsup_corpus.txt.gz",
                  tasks=("SST-2", "MRPC", "RTE"), vocab_size=30522, num_layers=12,
                  hidden_size=768, num_heads=12, max_seq_length=512, pretraining_steps=1000000,
                  pretraining_batch=256, pretraining_lr=1e-4, finetuning_epochs=3,
                  finetuning_batch=32, finetuning_lr=2e-5, dupe_factor=10),
}


def get_study(name: str) -> Study:
    if name not in STUDIES:
        raise StudyError(f"--study={name}: unknown study; expected one of "
                         f"{', '.join(STUDIES)} or all (--list describes them)")
    return STUDIES[name]


def get_scale(name: str) -> Scale:
    if name not in SCALES:
        raise StudyError(f"--scale={name}: unknown scale; expected one of {', '.join(SCALES)}")
    return SCALES[name]
