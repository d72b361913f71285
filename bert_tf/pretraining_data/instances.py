"""Documents -> training instances, reproducing the original's algorithm and RNG call order.

The steps (one `random.Random`, every call in this order, see the fixture trace):
  1. shuffle the documents once;
  2. for each of `dupe_factor` passes, for each document: draw `random() < short_seq_prob` (then
     `randint(2, max_num_tokens)` for a short target length), and cut the document into chunks
     of about that many tokens; per chunk with >= 2 sentences draw `randint(1, len-1)` for the
     end of segment A and `random() < 0.5` for random-next (a 1-sentence chunk is always
     random-next and draws neither); a random-next B starts at `randint(0, len(doc)-1)` in a
     document drawn by `randint(0, n_docs-1)` (up to 10 tries to avoid the current one), and
     the chunk's unused sentences are put back; truncation draws `random() < 0.5` per removed
     token (front or back of the longer side, B on ties); then masking (masking.py);
  3. shuffle all instances of all passes together.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Callable, Mapping, Sequence

from bert_tf.pretraining_data.masking import VocabInfo, create_masked_lm_predictions
from bert_tf.pretraining_data.options import PretrainingDataOptions


class TrainingInstance:
    """One pretraining example before padding.

    Attributes:
      input_ids: list[int], the masked sequence `[CLS] A [SEP] B [SEP]` (or `[CLS] A [SEP]`).
      segment_b_start: index of B's first token (len(input_ids) for single-segment examples);
        segment_ids are 0 before it and 1 from it.
      masked_lm_positions: sorted list[int] of predicted positions.
      masked_lm_ids: list[int], the original ids at those positions.
      is_random_next: True if B is a random segment (next_sentence_label 1).
    """

    __slots__ = ("input_ids", "segment_b_start", "masked_lm_positions", "masked_lm_ids",
                 "is_random_next")

    def __init__(self, input_ids: list, segment_b_start: int, masked_lm_positions: list,
                 masked_lm_ids: list, is_random_next: bool):
        self.input_ids = input_ids
        self.segment_b_start = segment_b_start
        self.masked_lm_positions = masked_lm_positions
        self.masked_lm_ids = masked_lm_ids
        self.is_random_next = is_random_next

    @property
    def segment_ids(self) -> list:
        """list[int] of len(input_ids): 0 for [CLS] A [SEP], 1 for B [SEP]."""
        n = len(self.input_ids)
        return [0] * self.segment_b_start + [1] * (n - self.segment_b_start)

    def tokens(self, inv_vocab: Mapping[int, str]) -> list:
        """The masked sequence as token strings."""
        return [inv_vocab[i] for i in self.input_ids]

    def __repr__(self) -> str:
        return (f"TrainingInstance(input_ids={self.input_ids}, segment_b_start="
                f"{self.segment_b_start}, masked_lm_positions={self.masked_lm_positions}, "
                f"masked_lm_ids={self.masked_lm_ids}, is_random_next={self.is_random_next})")


@dataclasses.dataclass
class InstanceStats:
    """Counters of instance generation (summed over shards in scalable mode).

    Attributes:
      documents: documents used (non-empty after tokenization).
      single_sentence_documents: documents of one sentence (always random-next in NSP mode).
      input_tokens: WordPieces in those documents (counted once, not per dupe).
      instances: instances made.
      random_next: instances whose B is random (NotNext, label 1).
      tokens: non-padding positions over all instances, [CLS]/[SEP] included.
      masked_positions: predicted positions over all instances.
      truncated_instances: instances that needed truncation.
      truncated_tokens: tokens removed by truncation.
    """

    documents: int = 0
    single_sentence_documents: int = 0
    input_tokens: int = 0
    instances: int = 0
    random_next: int = 0
    tokens: int = 0
    masked_positions: int = 0
    truncated_instances: int = 0
    truncated_tokens: int = 0

    def merge(self, other: "InstanceStats") -> None:
        """Adds `other`'s counts into this."""
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def to_dict(self) -> dict:
        """Counts plus the IsNext/NotNext shares."""
        d = dataclasses.asdict(self)
        n = max(self.instances, 1)
        d["is_next_share"] = (self.instances - self.random_next) / n if self.instances else 0.0
        d["not_next_share"] = self.random_next / n if self.instances else 0.0
        return d

    def count_documents(self, documents: Sequence) -> None:
        """Adds the document-level counts of `documents`."""
        self.documents += len(documents)
        for doc in documents:
            if len(doc) == 1:
                self.single_sentence_documents += 1
            for sentence in doc:
                self.input_tokens += len(sentence)


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_num_tokens: int,
                      rng: random.Random) -> int:
    """Trims the longer of A/B (B on ties) one token at a time, from the front if
    `random() < 0.5` else from the back, until len(A) + len(B) <= max_num_tokens. Modifies both
    lists in place.

    Which side loses each token depends only on the lengths (first the longer side down to the
    other's length, then B, A, B, A, ...), so the draws are made in one go and each side is cut
    with one slice: the same result and the same RNG calls as removing token by token.

    Returns:
      the number of tokens removed (one `random()` draw each).
    """
    len_a, len_b = len(tokens_a), len(tokens_b)
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return 0
    rnd = rng.random
    draws = [rnd() for _ in range(excess)]  # rng-site: truncate.delete_front_if_lt_0.5
    # First the longer side alone, down to the shorter one's length.
    lead = min(excess, abs(len_a - len_b))
    lead_draws, rest = draws[:lead], draws[lead:]
    a_draws = rest[1::2]  # After that: B, A, B, A, ... (a tie goes to B).
    b_draws = rest[0::2]
    if len_a > len_b:
        a_draws = lead_draws + a_draws
    else:
        b_draws = lead_draws + b_draws
    for seq, side_draws in ((tokens_a, a_draws), (tokens_b, b_draws)):
        if side_draws:
            front = sum(1 for r in side_draws if r < 0.5)
            back = len(side_draws) - front
            if len(seq) - front - back < 1:
                raise AssertionError("truncation would empty a segment")
            del seq[len(seq) - back:]
            del seq[:front]
    return excess


def _make_instance(tokens_a: list, tokens_b: list | None, is_random_next: bool,
                   options: PretrainingDataOptions, vocab: VocabInfo, rng: random.Random,
                   stats: InstanceStats) -> TrainingInstance:
    if tokens_b is None:
        ids = [vocab.cls_id] + tokens_a + [vocab.sep_id]
        b_start = len(ids)
    else:
        ids = [vocab.cls_id] + tokens_a + [vocab.sep_id] + tokens_b + [vocab.sep_id]
        b_start = len(tokens_a) + 2
    output, positions, labels = create_masked_lm_predictions(ids, options, vocab, rng)
    stats.instances += 1
    stats.tokens += len(ids)
    stats.masked_positions += len(positions)
    if is_random_next:
        stats.random_next += 1
    return TrainingInstance(output, b_start, positions, labels, is_random_next)


def create_instances_from_document(all_documents: Sequence, document_index: int,
                                   options: PretrainingDataOptions, vocab: VocabInfo,
                                   rng: random.Random,
                                   stats: InstanceStats | None = None) -> list:
    """Instances of one document for one dupe pass (the original's algorithm).

    Args:
      all_documents: all documents (lists of sentences, each a non-empty list[int] of ids), in
        their shuffled order; random-next segments are drawn from them.
      document_index: the document to cut.
      options: lengths, probabilities, NSP or single-segment.
      vocab: VocabInfo.
      rng: the generator.
      stats: counters to update (optional).

    Returns:
      list of TrainingInstance, in document order.
    """
    if stats is None:
        stats = InstanceStats()
    if not options.next_sentence_prediction:
        return _create_single_segment_instances(all_documents[document_index], options, vocab,
                                                rng, stats)
    document = all_documents[document_index]
    max_num_tokens = options.max_num_tokens
    target_seq_length = max_num_tokens
    if rng.random() < options.short_seq_prob:  # rng-site: doc.short_seq_draw
        target_seq_length = rng.randint(2, max_num_tokens)  # rng-site: doc.short_target_len
    instances = []
    current_chunk: list = []
    current_length = 0
    n_sentences = len(document)
    n_docs = len(all_documents)
    i = 0
    while i < n_sentences:
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == n_sentences - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)  # rng-site: chunk.a_end
                tokens_a: list = []
                for j in range(a_end):
                    tokens_a.extend(current_chunk[j])
                tokens_b: list = []
                n_chunk = len(current_chunk)
                if n_chunk == 1 or rng.random() < 0.5:  # rng-site: chunk.is_random_next_draw
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        other = rng.randint(0, n_docs - 1)  # rng-site: chunk.random_document_index
                        if other != document_index:
                            break
                    random_document = all_documents[other]
                    last = len(random_document) - 1
                    random_start = rng.randint(0, last)  # rng-site: chunk.random_start
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    # The chunk's sentences after A were not used: put them back.
                    i -= len(current_chunk) - a_end
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                removed = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                if removed:
                    stats.truncated_instances += 1
                    stats.truncated_tokens += removed
                instances.append(_make_instance(tokens_a, tokens_b, is_random_next, options,
                                                vocab, rng, stats))
            current_chunk = []
            current_length = 0
        i += 1
    return instances


def _truncate_single(tokens: list, max_num_tokens: int, rng: random.Random) -> int:
    """Single-segment truncation: one draw per removed token, front if < 0.5 else back."""
    excess = len(tokens) - max_num_tokens
    if excess <= 0:
        return 0
    rnd = rng.random
    draws = [rnd() for _ in range(excess)]  # rng-site: truncate.delete_front_if_lt_0.5
    front = sum(1 for r in draws if r < 0.5)
    del tokens[len(tokens) - (excess - front):]
    del tokens[:front]
    return excess


def _create_single_segment_instances(document: Sequence, options: PretrainingDataOptions,
                                     vocab: VocabInfo, rng: random.Random,
                                     stats: InstanceStats) -> list:
    """No-NSP variant: chunks of whole sentences up to the target length -> `[CLS] A [SEP]`.

    Same target-length draws and truncation rule as the pair version; no a_end/random-next
    draws, and nothing is put back.
    """
    max_num_tokens = options.max_num_tokens
    target_seq_length = max_num_tokens
    if rng.random() < options.short_seq_prob:  # rng-site: doc.short_seq_draw
        target_seq_length = rng.randint(2, max_num_tokens)  # rng-site: doc.short_target_len
    instances = []
    chunk: list = []
    for i, segment in enumerate(document):
        chunk.extend(segment)
        if i == len(document) - 1 or len(chunk) >= target_seq_length:
            removed = _truncate_single(chunk, max_num_tokens, rng)
            if removed:
                stats.truncated_instances += 1
                stats.truncated_tokens += removed
            instances.append(_make_instance(chunk, None, False, options, vocab, rng, stats))
            chunk = []
    return instances


def create_training_instances(documents: list, options: PretrainingDataOptions,
                              vocab: VocabInfo, rng: random.Random,
                              to_record: Callable[[TrainingInstance], object] | None = None,
                              stats: InstanceStats | None = None, progress: bool = False) -> list:
    """All instances of a corpus, in the original's final (shuffled) order.

    Args:
      documents: tokenized documents (lists of non-empty lists of ids); shuffled in place.
      options, vocab, rng: as for `create_instances_from_document`.
      to_record: maps each instance to what is kept (e.g. its serialized bytes) as soon as it is
        made; the identity if None. The final shuffle only depends on how many there are.
      stats: counters to update (optional).
      progress: show a tqdm bar (count, rate, ETA) over the dupe_factor x documents passes on
        stderr. It touches no random state: the output is the same either way.

    Returns:
      list of `to_record(instance)`, shuffled as the original shuffles its instances.
    """
    if stats is None:
        stats = InstanceStats()
    stats.count_documents(documents)
    rng.shuffle(documents)  # rng-site: shuffle_documents
    records: list = []
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=options.dupe_factor * len(documents), unit="doc", desc="instances",
                   mininterval=1.0, smoothing=0.05)
    for _ in range(options.dupe_factor):
        for document_index in range(len(documents)):
            made = create_instances_from_document(documents, document_index, options, vocab, rng,
                                                  stats)
            if to_record is None:
                records.extend(made)
            else:
                records.extend(to_record(inst) for inst in made)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    rng.shuffle(records)  # rng-site: shuffle_instances
    return records
