"""The studies: declared grids of pretraining variants x fine-tuning tasks, with the papers'
own numbers, and the three scales they run at.

A `Study` lists `Variant`s (how the model was pretrained and how it is fine-tuned); every
variant of a study is pretrained and fine-tuned under the study's one budget (`Scale`: corpus,
model size, steps, batch, optimizer, seeds). A variant's pretraining is identified by
`Variant.pretraining_key` and its fine-tuning by `Variant.finetuning_key`, so variants that are
the same run in several studies (BERT Table 5's MLM+NSP is Table 8's 80/10/10) are run once.

Numbers in `paper` are the papers' dev-set scores (BERT: Devlin et al. 2019, Tables 5-8 and
Table 1's GLUE averages; GPT-1: Radford et al. 2018, Table 5), keyed by the paper's column
names. GPT-1 Figure 2 is a plot: its variants carry the paper's stated order ("order"), not
numbers read off the figure.
"""
from __future__ import annotations

import dataclasses

from bert_tf.errors import UserInputError
from bert_tf.studies.gates import PretrainingGate
from bert_tf.studies.statistics import Claim


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
      size: the paper's (L, H, A) of this row (BERT Table 6), resolved to this scale's model by
        `Scale.model_sizes`; None = the scale's own size.
      feature_layers: None = fine-tuned; else a `bert_tf.tasks.feature_based.FEATURE_LAYERS`
        name: the frozen pretrained BERT feeds a BiLSTM tagger (BERT Table 7, token tasks).
      transfer_layers: GPT fine-tuning: transformer layers copied from the pretrained model
        (0 = the embeddings only; None = all), GPT-1 Figure 2 (left).
      per_epoch: held-out score after every fine-tuning epoch (BERT vs GPT per epoch).
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
    size: tuple[int, int, int] | None = None
    feature_layers: str | None = None
    transfer_layers: int | None = None
    per_epoch: bool = False
    paper: dict = dataclasses.field(default_factory=dict)

    def model_size(self, scale: "Scale") -> tuple[int, int, int]:
        """This variant's (layers, hidden, heads) at `scale`."""
        if self.size is None:
            return (scale.num_layers, scale.hidden_size, scale.num_heads)
        if self.size not in scale.model_sizes:
            raise StudyError(f"scale {scale.name}: no model size declared for the paper's "
                             f"L/H/A {self.size} (variant {self.name})")
        return scale.model_sizes[self.size]

    def sized_scale(self, scale: "Scale") -> "Scale":
        """`scale` with this variant's model size (what the training functions read)."""
        layers, hidden, heads = self.model_size(scale)
        return dataclasses.replace(scale, num_layers=layers, hidden_size=hidden,
                                   num_heads=heads)

    def _size_suffix(self, scale: "Scale") -> str:
        size = self.model_size(scale)
        if size == (scale.num_layers, scale.hidden_size, scale.num_heads):
            return ""
        return "-L{}H{}A{}".format(*size)

    def pretraining_cell(self, scale: "Scale") -> str | None:
        """`pretraining_key` with the model size at `scale` (None: no pretraining). A sized
        variant whose size is the scale's own shares the unsized variant's cell."""
        key = self.pretraining_key
        return None if key is None else key + self._size_suffix(scale)

    def finetuning_cell(self, scale: "Scale") -> str:
        """`finetuning_key` with the model size at `scale`."""
        key = self.finetuning_key
        pre = self.pretraining_key or f"{self.model}-scratch"
        return pre + self._size_suffix(scale) + key[len(pre):]

    def applies_to(self, scale: "Scale") -> bool:
        """False for a transfer depth the scale's model does not have (GPT-1 Figure 2)."""
        return self.transfer_layers is None or \
            self.transfer_layers < self.model_size(scale)[0]

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
            if self.transfer_layers is not None:
                base += f"-transfer{self.transfer_layers}"
        elif self.head != "default":
            base += f"-{self.head}"
        if self.feature_layers is not None:
            base += f"-features-{self.feature_layers}"
        if self.per_epoch:
            base += "-per_epoch"
        return base


FEATURE_DESCRIPTIONS = {
    "embeddings": "embeddings", "second_to_last": "second-to-last layer",
    "last": "last layer", "sum_last_four": "sum of the last four layers",
    "weighted_sum_last_four": "weighted sum of the last four layers",
    "concat_last_four": "concatenation of the last four layers",
    "sum_all": "sum of all layers", "weighted_sum_all": "weighted sum of all layers",
    "concat_embeddings_and_all": "concatenation of the embedding output and all {L} layers"}
"""What each `bert_tf.tasks.feature_based.FEATURE_LAYERS` choice feeds the tagger, for the
tables ({L}: the model's number of layers)."""


def describe_features(feature_layers: str, num_layers: int) -> str:
    """The table's words for a feature-based run's features ("concatenation of the embedding
    output and all 2 layers" for a 2-layer model's fallback)."""
    return FEATURE_DESCRIPTIONS.get(feature_layers, feature_layers).format(L=num_layers)


@dataclasses.dataclass(frozen=True)
class NerColumn:
    """A column of a study that scores every variant on the scale's NER task (`Scale.ner_task`,
    entity F1) beside the study's own tasks: BERT Table 8's "NER fine-tune" and "NER
    feature-based" columns.

    The run of a variant in this column is the variant with `feature_layers` set
    (`NerColumn.variant_at`), so its cell is keyed by what it is and shared with any other
    study's identical run (at the base scale, Table 8's 80/10/10 NER runs are Table 7's
    fine-tuned and concat-last-four rows).

    Attributes:
      name: the column (our table's header, "column" of results.json).
      paper_column: the paper's column our scores are checked against (ordering).
      feature_layers: None = fine-tuned (`BertTokenClassifier`); else the
        `bert_tf.tasks.feature_based.FEATURE_LAYERS` choice of the frozen model that feeds the
        BiLSTM tagger.
      fallback_layers: the choice used where the variant's model has fewer layers than
        `feature_layers` reads (concat_last_four needs four; the tiny and small scales' models
        have two): it is named in the cell key and the table, never passed off as the paper's.
      scales: the scales that run this column (empty: every scale). BERT Table 5's NER column
        runs at small and base only: the tiny scale stays self-contained (no CoNLL files).
    """

    name: str
    paper_column: str
    feature_layers: str | None = None
    fallback_layers: str | None = None
    scales: tuple[str, ...] = ()

    def runs_at(self, scale: "Scale") -> bool:
        return not self.scales or scale.name in self.scales

    def layers_at(self, num_layers: int) -> str | None:
        """The feature choice run for a model of `num_layers` layers (None: fine-tuned)."""
        if self.feature_layers is None:
            return None
        from bert_tf.tasks.feature_based import min_layers

        if num_layers >= min_layers(self.feature_layers):
            return self.feature_layers
        if self.fallback_layers is None or num_layers < min_layers(self.fallback_layers):
            raise StudyError(f"NER column {self.name!r}: feature layers "
                             f"{self.feature_layers!r} need {min_layers(self.feature_layers)} "
                             f"layers, the model has {num_layers}, and no fallback fits")
        return self.fallback_layers

    def variant_at(self, variant: "Variant", scale: "Scale") -> "Variant":
        """The run that scores `variant` in this column at `scale` (`variant` itself when it
        is the same run)."""
        layers = self.layers_at(variant.model_size(scale)[0])
        return variant if layers == variant.feature_layers else \
            dataclasses.replace(variant, feature_layers=layers)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One fine-tuning of a study's grid at a scale (run once per seed).

    Attributes:
      variant: the table's row.
      run: the variant that is trained (`variant`, or its feature-based run for a NER column):
        its `finetuning_cell` keys the cell.
      task: the task's name (`Scale.tasks`, `Scale.ner_task`, ...).
      column: our table's column (the task's name, or the `NerColumn`'s).
      paper_column: the paper's column the ordering check uses (None: the one named like the
        task, else `Study.ordering_column`).
    """

    variant: Variant
    run: Variant
    task: str
    column: str
    paper_column: str | None = None


@dataclasses.dataclass(frozen=True)
class Study:
    """A declared grid: `variants` x the scale's tasks (and the study's NER columns).

    Attributes:
      name: --study value.
      title: heading of its table.
      paper_columns: the paper's table columns (in order); `Variant.paper` holds their values.
      metric_note: what the paper's numbers are.
      ordering_column: the paper column whose ranking of the variants is compared with ours
        when no paper column matches our task ("average": the mean over paper_columns; a key
        of `Variant.paper` that is not a column, e.g. "order", compares with a ranking the
        paper states in words or draws in a figure, described by `ordering_note`).
      ordering_note: how the paper's ranking is given when it is not a table column.
      task_set: which of the scale's tasks: "tasks" (`Scale.tasks`), "ner"
        (`Scale.ner_task`, token tagging, F1) or "comparison" (`Scale.comparison_task`).
      same_size_pairs: the ordering check compares only variants of the same model size.
      pretraining_metric: a held-out pretraining measure shown as a column of ours (BERT
        Table 6: "held_out_masked_lm_perplexity"), checked against the paper column
        `pretraining_paper_column` (lower is better).
      zero_shot: also score zero-shot heuristics of the GPT pretraining run's saved
        checkpoints on the tasks (GPT-1 Figure 2, right).
      ner_columns: columns scoring every variant on the scale's NER task too, fine-tuned or
        feature-based (`NerColumn`; BERT Table 8).
      cloze: a "cloze" column: the cloze probe of every pretrained variant's pretraining
        (`bert_tf.studies.cloze`; at scales with `Scale.cloze_items`), no fine-tuning.
    """

    name: str
    title: str
    variants: tuple[Variant, ...]
    paper_columns: tuple[str, ...]
    metric_note: str
    ordering_column: str = "average"
    ordering_note: str = ""
    task_set: str = "tasks"
    same_size_pairs: bool = False
    pretraining_metric: str | None = None
    pretraining_paper_column: str | None = None
    zero_shot: bool = False
    ner_columns: tuple[NerColumn, ...] = ()
    cloze: bool = False

    def tasks(self, scale: "Scale") -> tuple[str, ...]:
        """The fine-tuning tasks of this study's task set at `scale` (not its NER columns)."""
        if self.task_set == "ner":
            return (scale.ner_task,)
        if self.task_set == "comparison":
            return (scale.comparison_task,)
        if self.name in scale.study_tasks:
            return tuple(t for t in scale.study_tasks[self.name] if t in scale.tasks)
        return scale.tasks

    def data_tasks(self, scale: "Scale") -> tuple[str, ...]:
        """Every task whose data this study reads at `scale` (the task set's, then NER's)."""
        return tuple(dict.fromkeys(
            self.tasks(scale) + ((scale.ner_task,) if any(
                c.runs_at(scale) for c in self.ner_columns) else ())))

    def evaluations(self, scale: "Scale") -> tuple[Evaluation, ...]:
        """The grid at `scale`, row by row: each variant on each task of the task set, then in
        each NER column."""
        return tuple(
            e for v in self.variants for e in (
                *(Evaluation(v, v, task, task) for task in self.tasks(scale)),
                *(Evaluation(v, c.variant_at(v, scale), scale.ner_task, c.name, c.paper_column)
                  for c in self.ner_columns if c.runs_at(scale))))

    def at_scale(self, scale: "Scale", only: tuple[str, ...] = ()) -> "Study":
        """This study with the variants that apply at `scale` (and, when `only` is given, the
        variants named there)."""
        kept = scale.study_variants.get(self.name)
        variants = tuple(v for v in self.variants if v.applies_to(scale)
                         and (kept is None or v.name in kept)
                         and (not only or v.name in only))
        return dataclasses.replace(self, variants=variants)


_T5 = ("MNLI-m", "QNLI", "MRPC", "SST-2", "SQuAD")
BERT_TABLE5 = Study(
    name="bert_pretraining_tasks",
    title="BERT Table 5: effect of the pre-training tasks",
    paper_columns=_T5,
    metric_note="BERT-Base dev: accuracy, SQuAD v1.1 F1. Ours: CoLA Matthews correlation, "
                "STS-B Pearson correlation, SQuAD: official v1.1 F1 on a third of the dev "
                "articles after training on the other two thirds; those columns are checked "
                "against the mean of the paper's columns except SQuAD",
    variants=(
        Variant("mlm_nsp", "BERT (MLM + NSP)", paper=dict(zip(_T5, (84.4, 88.4, 86.7, 92.7, 88.5)))),
        Variant("no_nsp", "No NSP (MLM only)", objective="mlm",
                paper=dict(zip(_T5, (83.9, 84.9, 86.5, 92.6, 87.9)))),
        Variant("ltr_no_nsp", "LTR & No NSP", model="gpt", lm_coef=0.0,
                paper=dict(zip(_T5, (82.1, 84.3, 77.5, 92.1, 77.8)))),
        Variant("ltr_bilstm", "+ BiLSTM", model="gpt", head="bilstm", lm_coef=0.0,
                paper=dict(zip(_T5, (82.1, 84.1, 75.7, 91.6, 84.9)))),
        Variant("no_pretraining", "No pre-training (BERT, random init)", pretrained=False),
    ),
    # Not in the paper's Table 5: issue 33's "MLM > LTR on NER" (the left-to-right model
    # tags from the left context only, `ltr_tagger`); small and base only.
    ner_columns=(NerColumn("NER fine-tune", "", scales=("small", "base")),),
    cloze=True)

_T8 = ("MNLI fine-tune", "NER fine-tune", "NER feature-based")
BERT_TABLE8 = Study(
    name="bert_masking",
    title="BERT Table 8: masking strategies (MASK / SAME / RND)",
    paper_columns=_T8,
    metric_note="BERT-Base dev: MNLI accuracy, CoNLL-2003 NER F1; feature-based: the last four "
                "layers of the frozen BERT concatenated as the features (the paper's section "
                "C.2). Ours: the classification tasks fine-tuned (checked against MNLI), "
                "CoNLL-2003 NER fine-tuned and feature-based (frozen features into a randomly "
                "initialised two-layer BiLSTM tagger); a model with fewer than four layers "
                "concatenates every hidden state it has instead, as the column header says",
    ordering_column="MNLI fine-tune",
    ner_columns=(NerColumn("NER fine-tune", "NER fine-tune"),
                 NerColumn("NER feature-based", "NER feature-based",
                           feature_layers="concat_last_four",
                           fallback_layers="concat_embeddings_and_all")),
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

_T6 = ("LM (ppl)", "MNLI-m", "MRPC", "SST-2")
BERT_TABLE6 = Study(
    name="bert_model_size",
    title="BERT Table 6: model size",
    paper_columns=_T6,
    metric_note="BERT dev accuracy after 5 fine-tuning restarts; LM (ppl): held-out masked-LM "
                "perplexity of the training data",
    ordering_column="MNLI-m",
    pretraining_metric="held_out_masked_lm_perplexity",
    pretraining_paper_column="LM (ppl)",
    variants=tuple(
        Variant(f"L{size[0]}_H{size[1]}_A{size[2]}", f"#L={size[0]} #H={size[1]} #A={size[2]}",
                size=size, paper=dict(zip(_T6, paper)))
        for size, paper in (
            ((3, 768, 12), (5.84, 77.9, 79.8, 88.4)),
            ((6, 768, 3), (5.24, 80.6, 82.2, 90.7)),
            ((6, 768, 12), (4.68, 81.9, 84.8, 91.3)),
            ((12, 768, 12), (3.99, 84.4, 86.7, 92.9)),
            ((12, 1024, 16), (3.54, 85.7, 86.9, 93.3)),
            ((24, 1024, 16), (3.23, 86.6, 87.8, 93.7)))))

_T7 = ("Dev F1",)
_BASE = (12, 768, 12)  # the paper's Table 7 uses BERT-Base; `Scale.model_sizes` maps it
BERT_TABLE7 = Study(
    name="bert_feature_based",
    title="BERT Table 7: feature-based vs fine-tuning on CoNLL-2003 NER",
    paper_columns=_T7,
    metric_note="CoNLL-2003 NER dev F1, BERT-Base; feature-based: frozen BERT features into a "
                "randomly initialised two-layer 768-unit BiLSTM before the classifier",
    ordering_column="Dev F1",
    task_set="ner",
    variants=(
        Variant("fine_tuned", "Fine-tuning approach (BERT-Base)", size=_BASE,
                paper={"Dev F1": 96.4}),
        *(Variant(f"features_{layers}", label, size=_BASE, feature_layers=layers,
                  paper={"Dev F1": f1})
          for layers, label, f1 in (
              ("embeddings", "Feature-based: Embeddings", 91.0),
              ("second_to_last", "Feature-based: Second-to-Last Hidden", 95.6),
              ("last", "Feature-based: Last Hidden", 94.9),
              ("weighted_sum_last_four", "Feature-based: Weighted Sum Last Four Hidden", 95.9),
              ("concat_last_four", "Feature-based: Concat Last Four Hidden", 96.1),
              ("weighted_sum_all", "Feature-based: Weighted Sum All Layers", 95.5))),
    ))

GPT_FIGURE2 = Study(
    name="gpt_transfer_layers",
    title="GPT-1 Figure 2: transferred layers, and zero-shot heuristics during pre-training",
    paper_columns=(),
    metric_note="GPT-1 Figure 2 (left: MultiNLI and RACE accuracy against the number of "
                "layers transferred; right: zero-shot heuristics against pre-training updates). "
                "The paper draws these as curves and tables no numbers",
    ordering_column="order",
    ordering_note="the paper's Figure 2 (left): transferring the embeddings helps and every "
                  "transferred layer helps further (up to 9% on MultiNLI for all 12)",
    zero_shot=True,
    variants=tuple(
        Variant(f"transfer_{n}", f"{n} layer{'s' if n != 1 else ''} transferred"
                + (" (embeddings only)" if n == 0 else ""), model="gpt", lm_coef=0.5,
                transfer_layers=n, paper={"order": n})
        for n in (0, 1, 2, 3, 4, 6, 8, 10)) + (
        Variant("transfer_all", "all layers transferred", model="gpt", lm_coef=0.5,
                paper={"order": 12}),))

_BVG = ("GLUE avg (BERT Table 1)",)
BERT_VS_GPT = Study(
    name="bert_vs_gpt_epochs",
    title="BERT vs GPT of the same size: held-out accuracy after each fine-tuning epoch",
    paper_columns=_BVG,
    metric_note="neither paper fine-tunes on IMDb; the reference is BERT's Table 1 GLUE test "
                "average of BERT-Base (79.6) and OpenAI GPT (75.1), the same size (L=12 H=768)",
    ordering_column=_BVG[0],
    task_set="comparison",
    same_size_pairs=True,
    variants=(
        Variant("bert", "BERT (MLM + NSP)", per_epoch=True, paper={_BVG[0]: 79.6}),
        Variant("gpt", "GPT (left-to-right, aux LM)", model="gpt", lm_coef=0.5,
                per_epoch=True, paper={_BVG[0]: 75.1}),
        Variant("bert_smaller", "BERT (MLM + NSP), smaller", size=(3, 768, 12),
                per_epoch=True, paper={_BVG[0]: 79.6}),
        Variant("gpt_smaller", "GPT (left-to-right, aux LM), smaller", model="gpt",
                lm_coef=0.5, size=(3, 768, 12), per_epoch=True, paper={_BVG[0]: 75.1}),
    ))

STUDIES: dict[str, Study] = {s.name: s for s in (BERT_TABLE5, BERT_TABLE6, BERT_TABLE7,
                                                 BERT_TABLE8, GPT_TABLE5, GPT_FIGURE2,
                                                 BERT_VS_GPT)}
"""The implemented studies (--list)."""


@dataclasses.dataclass(frozen=True)
class Scale:
    """One budget shared by every variant of a study.

    Attributes:
      name: --scale value.
      corpus: pretraining text ("embedded": the pydoc topics of the tiny topic task's training
        split; else a path relative to --data_dir's parent, create_pretraining_data's format).
      tasks: fine-tuning tasks ("topic": the embedded topic task; GLUE names: --data_dir/glue;
        "SQuAD": the SQuAD v1.1 dev-article split, `bert_tf.studies.data.load_squad_split`).
      vocab_size, num_layers, hidden_size, num_heads, max_seq_length: the models (BERT and GPT
        the same size).
      pretraining_steps, pretraining_batch, pretraining_lr: the pretraining budget (tokens seen
        = steps x batch x max_seq_length for every variant).
      finetuning_epochs, finetuning_batch, finetuning_lr: fine-tuning budget.
      dupe_factor: pretraining-data passes with new masks.
      max_train_examples: cap on fine-tuning training examples (0: all).
      model_sizes: the papers' (L, H, A) -> this scale's (layers, hidden, heads), for sized
        variants (BERT Table 6, Table 7's BERT-Base, BERT vs GPT's smaller size).
      ner_task: token-tagging task (BERT Table 7): "conll2003" (--data_dir/conll2003).
      ner_max_sentences: cap on the NER training and held-out sentences (0: all).
      comparison_task: the BERT vs GPT per-epoch task ("topic", or "IMDb":
        --data_dir/imdb/train.tsv.gz split into train / held-out).
      held_out_every: (non-embedded corpora) every n-th document of the corpus is held out of
        pretraining and scores held-out masked-LM accuracy / perplexity (0: none).
      finetuning_seeds: the fine-tuning seeds run by default (--seeds overrides).
      pretraining_seeds: how many pretraining seeds each variant is pretrained with by default
        (--pretraining_seeds overrides): --seed, --seed + 1, ...
      task_max_seq_length: fine-tuning length per task (tasks not listed: max_seq_length,
        the pretraining length, which bounds them all: GPT's position table has n_ctx rows).
      task_max_train_examples: training-example cap per task (tasks not listed:
        max_train_examples; 0: all).
      head_tail_tasks: tasks whose long texts are cut to their head and tail
        (`data.head_tail_text`), for BERT, GPT and the baselines alike.
      do_lower_case: False = a cased vocabulary and cased tokenization everywhere (NER needs
        case).
      pretraining_gate: `gates.PretrainingGate` of this scale (None: no gate).
      study_variants: study name -> the variants run at this scale (studies not listed: all);
        the trim that fits a scale's CPU budget, said in the tables.
      study_tasks: study name -> the tasks of `tasks` it fine-tunes on at this scale (studies
        not listed: all of them; NER columns and the comparison task are not affected).
      cloze_items: items of the cloze probe (`bert_tf.studies.cloze`) scored on every
        pretraining of a study with `Study.cloze` (0: no probe at this scale).
      short_seq_length: BERT's two-phase pretraining (the paper's section A.2: 90% of the
        steps at a short length, the last 10% at the full length): the first phase's length
        (0: one phase, every step at `max_seq_length`). `pretraining_steps` is then the TOTAL
        of both phases (`pretraining_phases`), and one learning-rate schedule (warm-up over
        the first 10% of the total, linear decay to 0 at the total) spans both.
      short_fraction: the share of the steps run at `short_seq_length`.
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
    model_sizes: dict = dataclasses.field(default_factory=dict)
    ner_task: str = "conll2003"
    ner_max_sentences: int = 0
    comparison_task: str = "topic"
    held_out_every: int = 0
    finetuning_seeds: tuple[int, ...] = (1,)
    pretraining_seeds: int = 1
    task_max_seq_length: dict = dataclasses.field(default_factory=dict)
    task_max_train_examples: dict = dataclasses.field(default_factory=dict)
    head_tail_tasks: tuple[str, ...] = ()
    do_lower_case: bool = True
    pretraining_gate: PretrainingGate | None = None
    study_variants: dict = dataclasses.field(default_factory=dict)
    study_tasks: dict = dataclasses.field(default_factory=dict)
    cloze_items: int = 0
    short_seq_length: int = 0
    short_fraction: float = 0.9

    def pretraining_phases(self) -> tuple[tuple[int, int], ...]:
        """The pretraining's phases, ((steps, sequence length), ...): one phase of
        `pretraining_steps` at `max_seq_length`, or (with `short_seq_length`) the first
        round(short_fraction x steps) at the short length and the rest at the full length."""
        if not self.short_seq_length or self.short_seq_length >= self.max_seq_length:
            return ((self.pretraining_steps, self.max_seq_length),)
        short = int(round(self.short_fraction * self.pretraining_steps))
        short = min(max(short, 1), self.pretraining_steps - 1) if self.pretraining_steps > 1 \
            else self.pretraining_steps
        phases = ((short, self.short_seq_length),
                  (self.pretraining_steps - short, self.max_seq_length))
        return tuple(p for p in phases if p[0] > 0)

    @property
    def pretraining_tokens(self) -> int:
        """Token positions seen by one pretraining: sum of steps x batch x length per phase."""
        return sum(steps * self.pretraining_batch * seq
                   for steps, seq in self.pretraining_phases())

    def seq_for(self, task: str) -> int:
        """The fine-tuning length of `task` (at most the pretraining length)."""
        return min(self.max_seq_length, self.task_max_seq_length.get(task, self.max_seq_length))

    def max_train_for(self, task: str) -> int:
        """The training-example cap of `task` (0: all)."""
        if task == self.ner_task:
            return self.task_max_train_examples.get(task, self.ner_max_sentences)
        return self.task_max_train_examples.get(task, self.max_train_examples)


SCALES: dict[str, Scale] = {
    "tiny": Scale("tiny", corpus="embedded", tasks=("topic",), vocab_size=2000, num_layers=2,
                  hidden_size=64, num_heads=2, max_seq_length=64, pretraining_steps=150,
                  pretraining_batch=32, pretraining_lr=1e-3, finetuning_epochs=10,
                  finetuning_batch=32, finetuning_lr=1e-3, dupe_factor=3,
                  model_sizes={(3, 768, 12): (1, 64, 2), (6, 768, 3): (2, 64, 1),
                               (6, 768, 12): (2, 64, 2), (12, 768, 12): (4, 64, 2),
                               (12, 1024, 16): (4, 96, 3), (24, 1024, 16): (8, 96, 3)},
                  ner_max_sentences=400),
    # small_v1: the grid of the published docs/studies_small run (2026-11, one pretraining
    # seed, length 64, 5,000 training examples per task), kept so that its command still
    # means what it meant. L2 H128 A2 at length 64 (the quickstart's length: a step costs half
    # of length 128's), lr 1e-3. Length 128 with 6,000 steps stayed on the unigram plateau
    # (held-out masked-LM accuracy 0.155, training MLM loss flat at 5.8-6.0 from step 1,100
    # on). Its cells are keyed "small_v1-..." (the published ones were "small-...").
    "small_v1": Scale("small_v1", corpus="pretrain/imdb_unsup_corpus.txt.gz",
                   tasks=("SST-2", "MRPC", "RTE", "CoLA", "STS-B", "SQuAD"), vocab_size=8000,
                   num_layers=2, hidden_size=128, num_heads=2, max_seq_length=64,
                   pretraining_steps=8000,
                   pretraining_batch=32, pretraining_lr=1e-3, finetuning_epochs=3,
                   finetuning_batch=32, finetuning_lr=3e-4, dupe_factor=2,
                   max_train_examples=5000,
                   model_sizes={(3, 768, 12): (1, 128, 2), (6, 768, 3): (2, 128, 1),
                                (6, 768, 12): (2, 128, 2), (12, 768, 12): (4, 128, 2),
                                (12, 1024, 16): (4, 192, 3), (24, 1024, 16): (8, 192, 3)},
                   ner_max_sentences=2000, comparison_task="IMDb", held_out_every=100),
    # small (issue 33): the tasks that can show the claims at this size, with gates, 2
    # pretraining seeds x 3 fine-tuning seeds. Pretraining at length 192 (3x the tokens of
    # small_v1; SQuAD needs >= 192 and GPT's position table bounds every task's length),
    # fine-tuning each task at its own length. MRPC, RTE, CoLA and STS-B are left out: at
    # small_v1's size they scored at the majority class / CoLA 0 / STS-B far under word
    # overlap (docs/studies.md). Trimmed to ~10 CPU-hours (`--estimate`): Table 8's masking
    # mixtures 80/10/10, 100/0/0 and 0/0/100; Table 6's three smallest sizes.
    # Two-phase pretraining (2026-11-28, after the one-phase 6,000 x 192 cell stayed on the
    # unigram plateau): BERT's 90% of the steps at length 64, the last 10% at 192, with the
    # one-phase budget's tokens (6,000 x 32 x 192 = 36.9M = 13,500 x 32 x 64 + 1,500 x 32 x
    # 192): 15,000 steps, one schedule over both (docs/studies.md).
    "small": Scale("small", corpus="pretrain/imdb_unsup_corpus.txt.gz",
                   tasks=("SST-2", "SQuAD"), vocab_size=8000,
                   num_layers=2, hidden_size=128, num_heads=2, max_seq_length=192,
                   short_seq_length=64, short_fraction=0.9,
                   pretraining_steps=15000, pretraining_batch=32, pretraining_lr=2e-3,
                   finetuning_epochs=3, finetuning_batch=32, finetuning_lr=3e-4,
                   dupe_factor=2, max_train_examples=0,
                   model_sizes={(3, 768, 12): (1, 128, 2), (6, 768, 3): (2, 128, 1),
                                (6, 768, 12): (2, 128, 2), (12, 768, 12): (4, 128, 2),
                                (12, 1024, 16): (4, 192, 3), (24, 1024, 16): (8, 192, 3)},
                   ner_max_sentences=0, comparison_task="IMDb", held_out_every=100,
                   finetuning_seeds=(1, 2, 3), pretraining_seeds=2,
                   task_max_seq_length={"SST-2": 64, "conll2003": 64, "IMDb": 128,
                                        "SQuAD": 192},
                   task_max_train_examples={"SST-2": 20000, "IMDb": 5000},
                   head_tail_tasks=("IMDb",),
                   # lr 2e-3 and the gate at 30% (step 4,500), chosen from the trials of
                   # 2026-11-28 before the grid (docs/studies.md): phase 1 to step 3,000 at
                   # lr 1e-3 / 2e-3 / 3e-3 ended at 100-step-mean perplexity 352 / 245 / 455;
                   # the plateau ends after 3,000-5,000 updates at this size.
                   pretraining_gate=PretrainingGate(bert_perplexity=200.0,
                                                    gpt_perplexity=250.0, fraction=0.3),
                   study_variants={
                       "bert_masking": ("mask80_10_10", "mask100_0_0", "mask0_0_100"),
                       "bert_model_size": ("L3_H768_A12", "L6_H768_A12", "L12_H768_A12"),
                       "bert_vs_gpt_epochs": ("bert", "gpt")},
                   study_tasks={"bert_pretraining_tasks": ("SST-2", "SQuAD"),
                                "gpt_ablations": ("SST-2",), "gpt_transfer_layers": ("SST-2",),
                                "bert_model_size": ("SST-2",), "bert_masking": ()},
                   cloze_items=2000),
    "base": Scale("base", corpus="pretrain/imdb_unsup_corpus.txt.gz",
                  tasks=("SST-2", "MRPC", "RTE", "CoLA", "STS-B", "SQuAD"), vocab_size=30522,
                  num_layers=12, hidden_size=768, num_heads=12, max_seq_length=512,
                  pretraining_steps=1000000,
                  pretraining_batch=256, pretraining_lr=1e-4, finetuning_epochs=3,
                  finetuning_batch=32, finetuning_lr=2e-5, dupe_factor=10,
                  model_sizes={(3, 768, 12): (3, 768, 12), (6, 768, 3): (6, 768, 3),
                               (6, 768, 12): (6, 768, 12), (12, 768, 12): (12, 768, 12),
                               (12, 1024, 16): (12, 1024, 16),
                               (24, 1024, 16): (24, 1024, 16)},
                  comparison_task="IMDb", held_out_every=100,
                  finetuning_seeds=(1, 2, 3), pretraining_seeds=2,
                  task_max_seq_length={"SST-2": 128, "conll2003": 128, "IMDb": 512,
                                       "SQuAD": 384},
                  head_tail_tasks=("IMDb",), cloze_items=2000,
                  # The same plateau test as small's (a test of leaving the unigram plateau,
                  # not a quality bar); not yet checked against a base-size run.
                  pretraining_gate=PretrainingGate(bert_perplexity=200.0,
                                                   gpt_perplexity=250.0)),
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


def _null(name: str, study: Study, column: str, better: str, worse: str, paper_column: str,
          text: str) -> Claim:
    """An expected null: the paper's own difference of the two rows in `paper_column`."""
    rows = {v.name: v for v in study.variants}
    effect = round(rows[better].paper[paper_column] - rows[worse].paper[paper_column], 2)
    return Claim(name, study.name, column, better, worse, effect, expected_null=True,
                 text=text)


CLAIMS: tuple[Claim, ...] = (
    # BERT Table 5.
    Claim("t5_pretrained_sst2", BERT_TABLE5.name, "SST-2", "mlm_nsp", "no_pretraining", None,
          primary=True, text="pretrained BERT > BERT from random weights (SST-2)"),
    Claim("t5_pretrained_squad", BERT_TABLE5.name, "SQuAD", "mlm_nsp", "no_pretraining", None,
          primary=True, text="pretrained BERT > BERT from random weights (SQuAD split)"),
    Claim("t5_mlm_over_ltr_squad", BERT_TABLE5.name, "SQuAD", "no_nsp", "ltr_no_nsp", 10.1,
          primary=True, text="MLM > LTR on SQuAD (paper 87.9 vs 77.8 F1)"),
    Claim("t5_bilstm_over_ltr_squad", BERT_TABLE5.name, "SQuAD", "ltr_bilstm", "ltr_no_nsp",
          7.1, primary=True, text="LTR + BiLSTM > LTR on SQuAD (paper 84.9 vs 77.8 F1)"),
    Claim("t5_mlm_over_ltr_cloze", BERT_TABLE5.name, "cloze", "no_nsp", "ltr_no_nsp", None,
          text="MLM > LTR on the cloze probe (right context; no paper number)"),
    _null("t5_nsp_sst2", BERT_TABLE5, "SST-2", "mlm_nsp", "no_nsp", "SST-2",
          "NSP's effect on SST-2 (paper +0.1)"),
    _null("t5_nsp_squad", BERT_TABLE5, "SQuAD", "mlm_nsp", "no_nsp", "SQuAD",
          "NSP's effect on SQuAD (paper +0.6)"),
    _null("t5_mlm_vs_ltr_sst2", BERT_TABLE5, "SST-2", "no_nsp", "ltr_no_nsp", "SST-2",
          "MLM vs LTR on SST-2 (paper +0.5)"),
    Claim("t5_mlm_over_ltr_ner", BERT_TABLE5.name, "NER fine-tune", "no_nsp", "ltr_no_nsp",
          None, primary=True,
          text="MLM > LTR on CoNLL-2003 NER (fine-tuned; not a column of the paper's Table 5)"),
    Claim("t5_bilstm_over_ltr_ner", BERT_TABLE5.name, "NER fine-tune", "ltr_bilstm",
          "ltr_no_nsp", None,
          text="LTR + BiLSTM > LTR on NER (the BiLSTM adds the right context)"),
    # BERT Table 8: 0/0/100 the worst; the other mixtures within a point of 80/10/10.
    Claim("t8_80_10_10_over_0_0_100_features", BERT_TABLE8.name, "NER feature-based",
          "mask80_10_10", "mask0_0_100", 0.3,
          text="80/10/10 > 0/0/100 (RND only) on feature-based NER (paper 94.9 vs 94.6)"),
    *(_null(f"t8_{other}_{col.split()[1].replace('-', '_')}", BERT_TABLE8, col,
            "mask80_10_10", other, col, f"80/10/10 vs {other[4:].replace('_', '/')} on {col}")
      for other in ("mask100_0_0", "mask80_0_20", "mask80_20_0", "mask0_20_80")
      for col in ("NER fine-tune", "NER feature-based")),
    # BERT Table 6: the larger model higher on SST-2.
    Claim("t6_l12_over_l3_sst2", BERT_TABLE6.name, "SST-2", "L12_H768_A12", "L3_H768_A12",
          4.5, primary=True, text="12/768/12 > 3/768/12 on SST-2 (paper 92.9 vs 88.4)"),
    Claim("t6_l6_over_l3_sst2", BERT_TABLE6.name, "SST-2", "L6_H768_A12", "L3_H768_A12", 2.9,
          text="6/768/12 > 3/768/12 on SST-2 (paper 91.3 vs 88.4)"),
    # BERT Table 6: the larger model lower held-out masked-LM perplexity (paired over the
    # sequences of one shared held-out file; `cell_runs.held_out_masked_lm`).
    Claim("t6_l12_over_l3_ppl", BERT_TABLE6.name, "LM (ppl)", "L12_H768_A12", "L3_H768_A12",
          1.85, primary=True, lower_is_better=True,
          text="12/768/12 lower held-out masked-LM perplexity than 3/768/12 (paper 3.99 vs "
               "5.84)"),
    Claim("t6_l6_over_l3_ppl", BERT_TABLE6.name, "LM (ppl)", "L6_H768_A12", "L3_H768_A12",
          1.16, lower_is_better=True,
          text="6/768/12 lower held-out masked-LM perplexity than 3/768/12 (paper 4.68 vs "
               "5.84)"),
    # BERT Table 7: fine-tuned >= best feature-based >= embeddings only.
    Claim("t7_finetuned_over_embeddings", BERT_TABLE7.name, "conll2003", "fine_tuned",
          "features_embeddings", 5.4, primary=True,
          text="fine-tuned > embeddings-only features on NER (paper 96.4 vs 91.0)"),
    Claim("t7_concat4_over_embeddings", BERT_TABLE7.name, "conll2003",
          "features_concat_last_four", "features_embeddings", 5.1, primary=True,
          text="concat of the last four layers > embeddings only (paper 96.1 vs 91.0)"),
    _null("t7_finetuned_vs_concat4", BERT_TABLE7, "conll2003", "fine_tuned",
          "features_concat_last_four", "Dev F1",
          "fine-tuned vs the best feature-based (paper +0.3)"),
    # GPT-1 Table 5.
    Claim("g5_pretrained_sst2", GPT_TABLE5.name, "SST-2", "aux_lm", "no_pretraining", 7.3,
          primary=True, text="pretrained GPT > GPT from random weights (SST-2, paper 91.3 vs "
                             "84.0)"),
    _null("g5_aux_lm_sst2", GPT_TABLE5, "SST-2", "aux_lm", "no_aux_lm", "SST-2",
          "the auxiliary LM's effect on SST-2 (paper -0.7)"),
    # GPT-1 Figure 2 (left): more transferred layers, higher accuracy.
    Claim("f2_all_over_embeddings_sst2", GPT_FIGURE2.name, "SST-2", "transfer_all",
          "transfer_0", 9.0, primary=True,
          text="all layers transferred > embeddings only (paper: up to +9 on MultiNLI)"),
    Claim("f2_one_over_embeddings_sst2", GPT_FIGURE2.name, "SST-2", "transfer_1",
          "transfer_0", None, text="one transferred layer > embeddings only"),
    # BERT vs GPT of the same size (BERT Table 1: 79.6 vs 75.1 GLUE average).
    Claim("bvg_bert_over_gpt_imdb", BERT_VS_GPT.name, "IMDb", "bert", "gpt", 4.5,
          text="BERT > GPT of the same size (IMDb; BERT Table 1: GLUE 79.6 vs 75.1)"),
    Claim("bvg_smaller_bert_over_gpt_imdb", BERT_VS_GPT.name, "IMDb", "bert_smaller",
          "gpt_smaller", 4.5, text="BERT > GPT at the smaller size (IMDb)"),
)
"""Every paper claim a study checks, with its expected direction, declared before any run
(`statistics.judge_claims` gives the verdicts; docs/studies.md, "Method"). `paper_effect` None:
the paper states the direction without a number for these rows."""
