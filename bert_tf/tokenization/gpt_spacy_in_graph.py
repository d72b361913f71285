"""spaCy's English tokenizer algorithm as TensorFlow ops (for the in-graph GPT-1 encoder).

GPT-1's pieces are decided by `spacy.blank("en")`'s tokenizer on the standardized text. This
module re-runs that tokenizer's algorithm (spaCy 3.8 `Tokenizer.__call__`: `_split_affixes`,
`_attach_tokens` on space-free chunks, `_apply_special_cases` over a text's chunks) with TF ops
only. Its *data* -- the prefix, suffix and infix regexes, the URL matcher and the special-case
table -- are read from the installed spaCy when `SpacyEnglishRules.from_spacy()` runs (at build /
export time); the graph then needs no spaCy.

Per chunk (a piece of the standardized text between spaces), then per text:

1. **affix loop** (`_split_affixes`), vectorized over all chunks with a `while_loop`: stop at a
   special case; else find the prefix (RE2 leftmost-first alternation = Python's `re.match`
   over `^a|^b|...`), stop if the rest is a special case; find the suffix of the rest (Python's
   `re.search` over `a$|b$|...` = the earliest start; RE2 has no look-behind, so every
   look-behind alternative is its own regex `^(.*?LB)S$` and the earliest start of all wins),
   stop if what precedes it is a special case; strip both; repeat while something was stripped.
2. **the rest** (`_attach_tokens`): a special case -> its tokens; a URL (`url_match`,
   translated to RE2, its private-IP look-aheads as a second regex) -> one token; else split at
   infix matches (`finditer` semantics computed per character: every infix alternative of the
   English defaults is one character with one-character look-around, except `\\.\\.+`, a run
   of dots); a match at position 0 is skipped, as spaCy does.
3. **special-case matcher** (`_apply_special_cases`), over the tokens of a whole text: token
   runs equal to a special case's own affix tokenization (`Mr` `.` from `Mr.President`) become
   the special case's tokens (`Mr.`); longest first, then leftmost; a candidate is refused when
   its first or last token lies in any earlier candidate, applied or refused; a candidate that
   crosses a space is never applied but blocks like any other (`back'' ''Return`: spaCy keeps
   `'` `'` `Return`; `worth it:o )`: the emoticon `:o)` across the space blocks `:o`).

Known simplification (enumerated in docs/gpt_tokenization.md): multi-character hyphen infixes
(`--`, `——`; `text_standardize` spaces out every `-`/`~` run and maps `—`/`–` to `-` first, so
they never reach spaCy inside a chunk).
"""
from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field
from typing import Mapping

import tensorflow as tf

__all__ = ["SpacyEnglishRules", "SpacyTokenizerOps", "python_class", "re2_class_body"]

_MAX_AFFIX_STEPS = 64


def re2_class_body(codepoints) -> str:
    """Codepoints -> the body of an RE2 class (`\\x{41}-\\x{5A}\\x{5F}`), ranges merged."""
    ranges: list[list[int]] = []
    for cp in sorted(set(codepoints)):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges)


@functools.lru_cache(maxsize=None)
def python_class(name: str) -> str:
    """RE2 class body for Python's Unicode `\\w`, `\\d` or `\\s` (RE2's are ASCII-only)."""
    test = {"w": lambda c: c.isalnum() or c == "_", "d": str.isdecimal, "s": str.isspace}[name]
    return re2_class_body(cp for cp in range(sys.maxunicode + 1)
                       if not 0xD800 <= cp <= 0xDFFF and test(chr(cp)))


def _to_re2(pattern: str) -> str:
    """A Python `re` pattern (as spaCy writes them) -> RE2 syntax: `\\uXXXX`/`\\UXXXXXXXX`
    escapes, `\\'`, Unicode `\\w \\d \\s \\S` (inside and outside classes; `\\w` as
    `[\\pL\\pN_]`, `\\d` as `\\p{Nd}`: Python's definitions, with RE2's Unicode tables)."""
    out = []
    i = 0
    in_class = False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            n = pattern[i + 1]
            if n == "u":
                out.append(f"\\x{{{pattern[i + 2:i + 6]}}}")
                i += 6
                continue
            if n == "U":
                out.append(f"\\x{{{int(pattern[i + 2:i + 10], 16):X}}}")
                i += 10
                continue
            if n == "'":
                out.append("'")
            elif n in "wds":
                body = {"w": "\\pL\\pN_", "d": "\\p{Nd}"}.get(n) or python_class(n)
                out.append(body if in_class else f"[{body}]")
            elif n == "S":
                if in_class:
                    raise ValueError(f"\\S inside a class is not supported: {pattern!r}")
                out.append(f"[^{python_class('s')}]")
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            out.append(c)
            if pattern[i + 1:i + 2] == "^":
                out.append("^")
                i += 1
            if pattern[i + 1:i + 2] == "]":
                out.append("\\]")
                i += 1
        elif c == "]" and in_class:
            in_class = False
            out.append(c)
        elif in_class and c in "[":
            out.append("\\[")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _split_lookbehind(piece: str) -> tuple[str, str]:
    """`(?<=X)Y` -> (X, Y); a piece without a leading look-behind -> ("", piece)."""
    if not piece.startswith("(?<="):
        return "", piece
    i, depth, in_class = 4, 1, False
    while i < len(piece):
        c = piece[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return piece[4:i], piece[i + 1:]
        i += 1
    raise ValueError(f"unbalanced look-behind in {piece!r}")


def _split_lookahead(piece: str) -> tuple[str, str]:
    """`Y(?=X)` -> (Y, X); no trailing look-ahead -> (piece, "")."""
    m = re.search(r"\(\?=(\[[^\]]*\])\)$", piece)
    if not m:
        return piece, ""
    return piece[:m.start()], m.group(1)


@dataclass
class SpacyEnglishRules:
    """The data of spaCy's English tokenizer, in RE2 form (see the module docstring).

    Attributes:
      prefix: RE2 alternation of every prefix piece (leftmost-first = Python's order).
      plus_prefix: whether `\\+(?![0-9])` is a prefix (RE2 has no look-ahead: checked apart).
      suffix_plain: RE2 alternation of the suffix pieces without look-behind.
      suffix_lookbehind: [(look-behind, suffix)] pieces with a look-behind.
      infix_chars: [(look-behind class or "", character class, look-ahead class or "")] for the
        one-character infixes, in spaCy's order; `infix_dot_runs`: `\\.\\.+` is an infix.
      url: RE2 of `url_match` without its look-aheads; url_excluded: RE2 of the strings those
        look-aheads exclude (private IPv4 hosts), or "".
      specials: {chunk: [tokens]}: spaCy's special cases (keys without whitespace).
      matcher: {affix tokens joined by " ": special-case tokens}: `_apply_special_cases`.
    """
    prefix: str
    plus_prefix: bool
    suffix_plain: str
    suffix_lookbehind: list[tuple[str, str]]
    infix_chars: list[tuple[str, str, str]]
    infix_dot_runs: bool
    url: str
    url_excluded: str
    specials: dict[str, list[str]] = field(default_factory=dict)
    matcher: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_spacy(cls, nlp=None) -> "SpacyEnglishRules":
        """Reads the installed spaCy's English defaults (`spacy.blank("en")`)."""
        if nlp is None:
            import spacy  # pylint: disable=import-outside-toplevel
            nlp = spacy.blank("en")
        defaults = nlp.Defaults
        tokenizer = nlp.tokenizer
        prefixes = [p for p in defaults.prefixes if p.strip()]
        plus = r"\+(?![0-9])" in prefixes
        prefix = "|".join(_to_re2(r"\+" if p == r"\+(?![0-9])" else p) for p in prefixes)
        plain, lookbehind = [], []
        for piece in (p for p in defaults.suffixes if p.strip()):
            lb, rest = _split_lookbehind(piece)
            if lb:
                lookbehind.append((_to_re2(lb), _to_re2(rest)))
            else:
                plain.append(_to_re2(piece))
        infix_chars, dot_runs = [], False
        for piece in (p for p in defaults.infixes if p.strip()):
            if piece == r"\.\.+":
                dot_runs = True
                continue
            lb, rest = _split_lookbehind(piece)
            core, la = _split_lookahead(rest)
            if core.startswith("(?:") and "|" in core:
                # hyphens: keep the one-character alternatives (see the module docstring)
                alts = [a for a in core[3:-1].split("|") if len(a) == 1]
                core = "[" + "".join(re.escape(a) for a in alts) + "]"
            infix_chars.append((_to_re2(lb), _to_re2(core), _to_re2(la)))
        url_pattern = tokenizer.url_match.__self__.pattern if tokenizer.url_match else ""
        url, excluded = _url_to_re2(url_pattern)
        specials = {k: _orths(v) for k, v in tokenizer.rules.items()
                    if k and not any(ch.isspace() for ch in k)}
        matcher = {}
        for key, tokens in specials.items():
            if (tokenizer.find_prefix(key) or tokenizer.find_infix(key)
                    or tokenizer.find_suffix(key)):
                # kept when equal to the tokens too: a longer match blocks shorter ones
                matcher[" ".join(_affix_tokens(tokenizer, key))] = tokens
        return cls(prefix=prefix, plus_prefix=plus, suffix_plain="|".join(plain),
                   suffix_lookbehind=lookbehind, infix_chars=infix_chars, infix_dot_runs=dot_runs,
                   url=url, url_excluded=excluded, specials=specials, matcher=matcher)


def _orths(substrings) -> list[str]:
    from spacy.attrs import ORTH  # pylint: disable=import-outside-toplevel
    return [s[ORTH] if ORTH in s else s["ORTH"] for s in substrings]


def _affix_tokens(tokenizer, text: str) -> list[str]:
    """spaCy's tokens of `text` without special cases (`_tokenize_affixes(text, False)`):
    a fresh tokenizer with the same regexes and no rules."""
    bare = _bare_tokenizer(tokenizer)
    return [t.text for t in bare(text)]


_BARE: dict[int, object] = {}


def _bare_tokenizer(tokenizer):
    from spacy.tokenizer import Tokenizer  # pylint: disable=import-outside-toplevel
    key = id(tokenizer)
    if key not in _BARE:
        _BARE[key] = Tokenizer(tokenizer.vocab, rules={}, prefix_search=tokenizer.prefix_search,
                               suffix_search=tokenizer.suffix_search,
                               infix_finditer=tokenizer.infix_finditer,
                               token_match=tokenizer.token_match, url_match=tokenizer.url_match)
    return _BARE[key]


def _url_to_re2(pattern: str) -> tuple[str, str]:
    """spaCy's URL_MATCH -> (RE2 without the negative look-aheads, RE2 matching what they
    exclude). The look-aheads guard the dotted-IPv4 alternative against private ranges."""
    if not pattern:
        return "", ""
    pattern = pattern.replace("(?u)", "")
    lookaheads = re.findall(r"\(\?!((?:[^()]|\((?:[^()]|\([^()]*\))*\))*)\)", pattern)
    stripped = pattern
    for la in lookaheads:
        stripped = stripped.replace(f"(?!{la})", "", 1)
    # Counted repetitions of large UTF-8 classes ({0,62}, {2,63}: DNS label lengths) blow RE2's
    # DFA budget (it falls back to the slow NFA and logs an error per call): unbounded here.
    stripped = stripped.replace("{0,62}", "*").replace("{2,63}", "{2,}")
    url = _to_re2(stripped)
    if not lookaheads:
        return url, ""
    # The excluded strings: the same URL with the host starting with one of the private ranges.
    marker = "(?:[1-9]\\d?|1\\d\\d|2[01]\\d|22[0-3])"
    ip_start = stripped.find(marker)
    if ip_start < 0:
        return url, ""
    head = stripped[:ip_start]
    head = head[:head.rfind("(?:")]  # drop the group that opens the host alternatives
    excluded = head + "(?:" + "|".join(lookaheads) + ").*"
    return url, _to_re2(excluded)


def _string_table(mapping: Mapping[str, str], default: str = "") -> tf.lookup.StaticHashTable:
    keys = list(mapping)
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(keys or [""], tf.string),
            tf.constant([mapping[k] for k in keys] or [default], tf.string)),
        default_value=default)


class SpacyTokenizerOps(tf.Module):
    """[N] space-free chunks -> [N, (tokens)]: spaCy's English tokenizer (module docstring)."""

    def __init__(self, rules: SpacyEnglishRules, name: str | None = None):
        super().__init__(name=name)
        self.rules = rules
        self._specials = _string_table({k: " ".join(v) for k, v in rules.specials.items()})
        self._matcher = _string_table({k: " ".join(v) for k, v in rules.matcher.items()})
        self._matcher_max = max((k.count(" ") + 1 for k in rules.matcher), default=0)
        self._prefix_re = f"^(?:({rules.prefix})(?s:.*)|(?s:.*))$"
        self._suffix_res = [f"^((?s:.*?))(?:{rules.suffix_plain})$"] + [
            f"^((?s:.*?){lb})(?:{s})$" for lb, s in rules.suffix_lookbehind]
        self._url_re = rules.url
        self._url_excluded_re = rules.url_excluded

    # -- lookups ---------------------------------------------------------------------------
    def _special(self, s: tf.Tensor) -> tf.Tensor:
        return self._specials.lookup(s)

    def _is_special(self, s: tf.Tensor) -> tf.Tensor:
        return tf.strings.length(self._specials.lookup(s)) > 0

    def _prefix(self, s: tf.Tensor) -> tf.Tensor:
        pre = tf.strings.regex_replace(s, self._prefix_re, "\\1")
        if self.rules.plus_prefix:
            digit_after = tf.strings.regex_full_match(s, "\\+[0-9](?s:.*)")
            pre = tf.where(tf.logical_and(pre == "+", digit_after), "", pre)
        return pre

    def _suffix(self, s: tf.Tensor) -> tf.Tensor:
        n = tf.strings.length(s)
        best = n
        for pattern in self._suffix_res:
            head = tf.strings.regex_replace(s, pattern, "\\1")
            head_len = tf.strings.length(head)
            matched = head_len < n  # no match: the string comes back unchanged
            best = tf.where(matched, tf.minimum(best, head_len), best)
        return tf.strings.substr(s, best, n - best)

    # -- 1. affixes ------------------------------------------------------------------------
    def split_affixes(self, chunks: tf.Tensor):
        """[N] chunks -> (prefix tokens [N] joined by spaces, rest [N], suffix tokens [N])."""
        n = tf.shape(chunks)[0]
        empty = tf.fill([n], "")

        def body(i, s, pre_acc, suf_acc, done):
            done = tf.logical_or(done, tf.logical_or(s == "", self._is_special(s)))
            pre = self._prefix(s)
            pre_len = tf.strings.length(pre)
            s_len = tf.strings.length(s)
            rest = tf.strings.substr(s, pre_len, s_len - pre_len)
            has_pre = pre_len > 0
            pre_break = has_pre & (rest != "") & self._is_special(rest)
            suf = self._suffix(rest)
            suf_len = tf.strings.length(suf)
            has_suf = suf_len > 0
            minus_suf = tf.strings.substr(s, tf.zeros_like(s_len), s_len - suf_len)
            suf_break = ~pre_break & has_suf & (minus_suf != "") & self._is_special(minus_suf)
            take_pre = has_pre & ~suf_break
            take_suf = has_suf & ~pre_break
            new_s = tf.where(take_pre & take_suf,
                             tf.strings.substr(s, pre_len, s_len - pre_len - suf_len),
                             tf.where(take_pre, rest, tf.where(take_suf, minus_suf, s)))
            active = ~done
            take_pre = take_pre & active
            take_suf = take_suf & active
            s = tf.where(active, new_s, s)
            pre_acc = tf.where(take_pre, pre_acc + " " + pre, pre_acc)
            suf_acc = tf.where(take_suf, suf + " " + suf_acc, suf_acc)
            done = done | pre_break | suf_break | ~(has_pre | has_suf)
            return i + 1, s, pre_acc, suf_acc, done

        _, s, pre_acc, suf_acc, _ = tf.while_loop(
            lambda i, s, p, q, done: tf.logical_and(i < _MAX_AFFIX_STEPS,
                                                    tf.logical_not(tf.reduce_all(done))),
            body, (tf.constant(0), chunks, empty, empty, tf.zeros([n], tf.bool)))
        return pre_acc, s, suf_acc

    # -- 2. the rest: special, URL or infixes -------------------------------------------------
    def _is_url(self, s: tf.Tensor) -> tf.Tensor:
        if not self._url_re:
            return tf.zeros_like(s, tf.bool)
        url = tf.strings.regex_full_match(s, self._url_re)
        if self._url_excluded_re:
            url = tf.logical_and(url, ~tf.strings.regex_full_match(s, self._url_excluded_re))
        return url

    def split_infixes(self, s: tf.Tensor) -> tf.Tensor:
        """[N] strings -> [N] strings with a space at every infix split point."""
        chars = tf.strings.unicode_split(s, "UTF-8")
        values, splits = chars.flat_values, chars.row_splits
        total = tf.shape(values, out_type=tf.int64)[0]
        rows = chars.value_rowids()
        pos = tf.range(total) - tf.gather(splits, rows)
        row_len = tf.gather(splits[1:] - splits[:-1], rows)
        prev = tf.where(pos > 0, tf.roll(values, 1, 0), "")
        nxt = tf.where(pos < row_len - 1, tf.roll(values, -1, 0), "")
        single = tf.zeros_like(values, tf.bool)
        for lb, core, la in self.rules.infix_chars:
            m = tf.strings.regex_full_match(values, core)
            if lb:
                m = m & tf.strings.regex_full_match(prev, lb)
            if la:
                m = m & tf.strings.regex_full_match(nxt, la)
            single = single | m
        is_dot = values == "."
        if self.rules.infix_dot_runs:
            prev_dot = prev == "."
            next_dot = nxt == "."
            in_run = is_dot & (prev_dot | next_dot)
        else:
            prev_dot = next_dot = in_run = tf.zeros_like(is_dot)
        single = single & ~in_run
        run_start = in_run & ~prev_dot
        nondot = tf.cast(~is_dot, tf.int64)
        # leading[i]: chars 0..i of the row are all dots.
        cum = tf.cumsum(nondot)
        row_base = tf.gather(tf.concat([[0], cum], 0), tf.gather(splits, rows))
        leading = (cum - row_base) == 0
        prev_single = tf.where(pos > 0, tf.roll(single, 1, 0), False)
        prev_in_run = tf.where(pos > 0, tf.roll(in_run, 1, 0), False)
        prev_leading = tf.where(pos > 0, tf.roll(leading, 1, 0), True)
        boundary = (pos > 0) & (
            single | run_start
            | (prev_single & (pos > 1))
            | (prev_in_run & ~in_run & ~prev_leading))
        pieces = tf.where(boundary, " " + values, values)
        return tf.strings.reduce_join(chars.with_flat_values(pieces), axis=-1)

    def attach(self, rest: tf.Tensor) -> tf.Tensor:
        """[N] rests of the affix loop -> [N] their tokens joined by spaces."""
        special = self._special(rest)
        is_special = tf.strings.length(special) > 0
        whole = is_special | self._is_url(rest) | (rest == "")
        infixed = self.split_infixes(rest)
        return tf.where(is_special, special, tf.where(whole, rest, infixed))

    # -- 3. the special-case matcher ---------------------------------------------------------
    def apply_matcher(self, tokens: tf.RaggedTensor,
                      text_ids: tf.Tensor | None = None) -> tf.RaggedTensor:
        """`_apply_special_cases` over whole texts: [N, (tokens)] -> [N, (tokens)].

        Args:
          tokens: [N chunks, (tokens)] the chunks' tokens before the matcher (affixes, specials,
            URLs, infixes), chunks of one text consecutive, in text order.
          text_ids: int64 [N], the text of each chunk (non-decreasing); None = every chunk is a
            text of its own.

        spaCy's matcher finds every token run of a text equal to a special case's affix
        tokenization (its candidates may cross a space: the tokens `'` `'` of `back''` and
        `''Return`), then keeps them longest first, then leftmost, refusing a candidate whose
        first or last token lies in any earlier candidate -- applied or refused. A candidate
        that crosses a space has no rule (no English special case holds a space), so it never
        changes tokens, but it still blocks. Because refused candidates block too, the tokens
        seen before the candidates of length n are exactly those of *all* longer candidates,
        and a candidate of length n at i is refused by one of its own length only when another
        starts in (i-n, i): the filter is computed length by length, with no sequential loop.
        """
        if not self._matcher_max:
            return tokens
        values = tokens.flat_values
        chunk_of = tokens.value_rowids()  # int64 [T]
        text_of = chunk_of if text_ids is None else tf.gather(
            tf.cast(text_ids, tf.int64), chunk_of)
        total = tf.shape(values, out_type=tf.int64)[0]
        idx = tf.range(total)

        def at(x, k, fill):
            """x[i + k] for every i, `fill` outside [0, total)."""
            if k == 0:
                return x
            j = idx + k
            inside = (j >= 0) & (j < total)
            return tf.where(inside, tf.gather(x, tf.minimum(tf.maximum(j, 0), total - 1)), fill)

        seen = tf.zeros([total], tf.bool)
        replacement = tf.fill([total], "")
        drop = tf.zeros([total], tf.bool)
        minus_one = tf.constant(-1, tf.int64)
        for n in range(self._matcher_max, 0, -1):
            gram = values
            for k in range(1, n):
                gram = gram + " " + at(values, k, "")
            value = self._matcher.lookup(gram)
            cand = tf.equal(at(text_of, n - 1, minus_one), text_of) & (
                tf.strings.length(value) > 0)
            earlier = tf.zeros([total], tf.bool)  # a candidate of this length starts in (i-n, i)
            for k in range(1, n):
                earlier = earlier | at(cand, -k, False)
            accept = cand & ~earlier & ~seen & ~at(seen, n - 1, False)
            apply = accept & tf.equal(at(chunk_of, n - 1, minus_one), chunk_of)
            replacement = tf.where(apply, value, replacement)
            covered = tf.zeros([total], tf.bool)
            applied = tf.zeros([total], tf.bool)
            for k in range(n):
                covered = covered | at(cand, -k, False)
                applied = applied | at(apply, -k, False)
            drop = drop | (applied & ~apply)
            seen = seen | covered
        new_values = tf.where(tf.strings.length(replacement) > 0, replacement, values)
        new_values = tf.where(drop, "", new_values)
        joined = tf.strings.reduce_join(tokens.with_flat_values(new_values), axis=-1,
                                        separator=" ")
        out = tf.strings.split(joined, " ")
        return tf.ragged.boolean_mask(out, tf.strings.length(out) > 0)

    def tokenize_chunks(self, chunks: tf.Tensor) -> tf.RaggedTensor:
        """[N] space-free chunks -> [N, (tokens)]: affixes, specials, URLs, infixes (no matcher)."""
        pre_acc, rest, suf_acc = self.split_affixes(chunks)
        joined = pre_acc + " " + self.attach(rest) + " " + suf_acc
        tokens = tf.strings.split(joined, " ")
        return tf.ragged.boolean_mask(tokens, tf.strings.length(tokens) > 0)

    def __call__(self, chunks: tf.Tensor, text_ids: tf.Tensor | None = None) -> tf.RaggedTensor:
        """[N] space-free chunks -> [N, (tokens)] spaCy tokens.

        `text_ids` (int64 [N], non-decreasing): the text of each chunk, for the special-case
        matcher, which runs over a whole text (`apply_matcher`); None: each chunk alone."""
        return self.apply_matcher(self.tokenize_chunks(chunks), text_ids)
