"""`GptCausalLM`: GPT-1 as a language model people use — load, generate, score (keras-hub's
`GPT2CausalLM` shape), and the library side of tools/generate.py and tools/score.py.

    import bert_tf
    lm = bert_tf.GptCausalLM.from_pretrained("finetune-transformer-lm/model")  # OpenAI's folder
    lm.generate("the meaning of life is", max_length=40)              # greedy
    lm.generate(["a", "b c"], max_new_tokens=20, sampler="top_p", top_p=0.9, seed=1)
    lm.score(["some text"]).perplexity                                # see bert_tf.gpt.generation

**What `from_pretrained` reads** (in this order):

* a `.keras` file of a `GptCausalLM` or a `GptModel` (e.g. tools/convert_checkpoint.py's);
* a folder in OpenAI's released layout: `params_shapes.json` + `params_0..9.npy` (in the folder,
  or in its `model/` or `original_params/` subfolder: the released repository, the fixture
  layout, a GPT pretraining run's output_dir), loaded as train.py loads them; the BPE files
  `encoder_bpe_40000.json` + `vocab_40000.bpe` beside them (or in the folder) give the tokenizer;
  the hyper-parameters come from a `config.json` there (bert_tf's `GptConfig` names; the
  descriptive fields of `../shared/fixtures/original_gpt/config.json` are understood, see
  `read_gpt_config_json`), else from the preset `openai-gpt` (OpenAI shipped no config file);
* a folder written by `GptCausalLM.save_pretrained` (the same layout plus `config.json` and
  `special_rows.npy`);
* a GPT pretraining checkpoint (a `ckpt-N` prefix or a folder with a `checkpoint` file) with
  `config=` or a `config.json` beside it;
* the preset name `openai-gpt` (`official_configs/gpt/openai-gpt.json`: the released model's 12
  layers, n_embd 768, 12 heads, n_ctx 512, 40,478 BPE tokens, 3 special tokens, gelu): a randomly
  initialised model of that shape (bert_tf ships no weights; a warning says so).

**The special-token rows.** OpenAI's files hold no rows for `_start_`, `_delimiter_`,
`_classify_`: train.py draws them at load time (`np.random.randn(n_special, n_embd) * 0.02` after
`np.random.seed(seed)`), so any score over a special token depends on that seed. Here they are read
from `special_rows.npy` (float32 [n_special, n_embd]) when the params folder has one (every
`save_pretrained` folder does), and otherwise drawn as train.py draws them with the seed of the
folder's `config.json` (its `seed` field) or, without one, **train.py's default seed 42**
(`DEFAULT_SPECIAL_ROWS_SEED`; `special_rows_seed=` overrides). The log says which.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import shutil
import sys
from typing import Any, Mapping, Sequence

import keras
import numpy as np
from absl import logging

from bert_tf import io_utils
from bert_tf.checkpoints.openai import (SHAPES_FILE, SPECIAL_ROWS_FILE, TRAIN_PY_SEED,
                                        load_original_params, load_special_rows,
                                        write_original_outputs)
from bert_tf.errors import UserInputError
from bert_tf.gpt.config import GptConfig, GptConfigError
from bert_tf.gpt.generation import (SAMPLERS, SCORE_KINDS, Generation, GenerationInputError,
                                    GptGenerator, Sampler, Scores)
from bert_tf.gpt.model import GptModel
from bert_tf.options import option

__all__ = ["GptCausalLM", "read_gpt_config_json", "GenerateOptions", "ScoreOptions",
           "run_generate", "run_score", "PRESETS", "SPECIAL_ROWS_FILE",
           "DEFAULT_SPECIAL_ROWS_SEED", "preset_gpt_config"]

CONFIG_FILE = "config.json"
ENCODER_FILE = "encoder_bpe_40000.json"
BPE_FILE = "vocab_40000.bpe"
DEFAULT_SPECIAL_ROWS_SEED = TRAIN_PY_SEED  # train.py's --seed default (42)
PRESETS = ("openai-gpt",)
SPECIAL_NAMES = ("_start_", "_delimiter_", "_classify_")  # train.py's, in id order

# Fields of a GPT-1 reference config.json (../shared/fixtures/original_gpt/config.json) besides
# GptConfig's: checked against the model where they say something about it, otherwise descriptive.
_CHECKED_FIELDS = ("seed", "ln_epsilon", "table_rows_model_we", "special_token_ids", "clf_token",
                   "position_ids", "n_transfer_layers")
_DESCRIPTIVE_FIELDS = ("set", "environment", "n_ctx_saved_positions", "max_len",
                       "n_transferred_arrays", "n_trainable_variables", "n_trainable_parameters",
                       "n_pretrained_arrays", "params_npy_chunk_sizes")


def _gpt_configs_dir() -> str:
    from bert_tf.presets import presets_dir

    return os.path.join(os.path.dirname(str(presets_dir())), "gpt")


def preset_gpt_config(name: str) -> GptConfig:
    """The `GptConfig` of a GPT-1 preset (`official_configs/gpt/<name>.json`)."""
    if name not in PRESETS:
        raise UserInputError(f"unknown GPT-1 preset {name!r}; the presets are "
                             f"{', '.join(PRESETS)}")
    return GptConfig.from_json_file(os.path.join(_gpt_configs_dir(), f"{name}.json"))


def read_gpt_config_json(path: str | os.PathLike) -> tuple[GptConfig, dict[str, Any]]:
    """A GPT-1 `config.json`: bert_tf's `GptConfig` fields plus, optionally, the fields of the
    original GPT-1 reference fixtures' config.json.

    Those extra fields are understood, not refused: `seed` (draws the special-token rows),
    `n_transfer_layers` (train.py's --n_transfer) and `special_token_ids` are used;
    `ln_epsilon`, `table_rows_model_we`, `clf_token` and `position_ids` must agree with the
    model (GptConfigError naming the file and field otherwise); descriptive ones (`set`,
    `environment`, `max_len`, parameter counts, ...) are ignored. Any other field is logged as a
    warning, and one that looks like a misspelt GptConfig field is an error.

    Returns (config, extras): extras has "seed", "n_transfer", "special_token_ids" when given.
    """
    path = os.fspath(path)
    try:
        data = json.loads(io_utils.read_text(path))
    except OSError as e:
        raise GptConfigError(f"cannot read GPT config file {path}: {e.strerror or e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GptConfigError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(data, Mapping):
        raise GptConfigError(f"{path}: expected a JSON object, got {type(data).__name__}")
    known = [f.name for f in dataclasses.fields(GptConfig)]
    extra = sorted(set(data) - set(known))
    unknown = [k for k in extra if k not in _CHECKED_FIELDS + _DESCRIPTIVE_FIELDS]
    for key in unknown:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
        if close:
            raise GptConfigError(f"{path}: unknown field {key!r}; did you mean {close[0]!r}?")
    if unknown:
        logging.warning("%s: ignoring field(s) %s (not GPT-1 hyper-parameters)", path,
                        ", ".join(map(repr, unknown)))
    config = GptConfig.from_dict({k: data[k] for k in known if k in data}, source=path)
    extras: dict[str, Any] = {}

    def bad(field: str, expected: Any) -> GptConfigError:
        return GptConfigError(f"{path}: field {field!r} is {data[field]!r}; this model needs "
                              f"{expected!r}")

    if "seed" in data:
        if isinstance(data["seed"], bool) or not isinstance(data["seed"], int):
            raise bad("seed", "an integer")
        extras["seed"] = int(data["seed"])
    if "ln_epsilon" in data and not math.isclose(float(data["ln_epsilon"]), 1e-5):
        raise bad("ln_epsilon", 1e-5)  # GPT-1's LayerNorm epsilon is fixed (train.py's norm)
    if "table_rows_model_we" in data and data["table_rows_model_we"] != config.table_rows:
        raise bad("table_rows_model_we", config.table_rows)
    first, last = config.first_position_id, config.table_rows - 1
    if "position_ids" in data and list(data["position_ids"]) != [first, last]:
        raise bad("position_ids", [first, last])
    specials = range(config.n_vocab, config.first_position_id)
    if "clf_token" in data and data["clf_token"] not in specials:
        raise bad("clf_token", f"a special-token id in [{config.n_vocab}, {first})")
    if "special_token_ids" in data:
        ids = data["special_token_ids"]
        if not isinstance(ids, Mapping) or sorted(ids.values()) != list(specials):
            raise bad("special_token_ids", f"names for the ids {config.n_vocab}..{first - 1}")
        extras["special_token_ids"] = {str(k): int(v) for k, v in ids.items()}
    if "n_transfer_layers" in data:
        n = data["n_transfer_layers"]
        if isinstance(n, bool) or not isinstance(n, int) or not -1 <= n <= config.n_layer:
            raise bad("n_transfer_layers", f"an integer in [-1, {config.n_layer}]")
        extras["n_transfer"] = n
    return config, extras


def _default_special_names(config: GptConfig) -> dict[str, int]:
    if config.n_special == len(SPECIAL_NAMES):
        return {name: config.n_vocab + i for i, name in enumerate(SPECIAL_NAMES)}
    return {f"_special_{i}_": config.n_vocab + i for i in range(config.n_special)}


def _params_folder(folder: str) -> str | None:
    for candidate in (folder, os.path.join(folder, "model"), os.path.join(folder,
                                                                          "original_params")):
        if io_utils.exists(os.path.join(candidate, SHAPES_FILE)):
            return candidate
    return None


def _is_tf_checkpoint(path: str) -> bool:
    import tensorflow as tf

    if io_utils.isdir(path):
        return tf.train.latest_checkpoint(path) is not None
    return io_utils.exists(path + ".index")


@keras.saving.register_keras_serializable(package="bert_tf")
class GptCausalLM(keras.Model):
    """GPT-1 with its tied LM head as a language model: `generate`, `score`, `from_pretrained`,
    `save_pretrained` (see the module docstring; the algorithms are `bert_tf.gpt.generation`'s).

    Args:
      config: the `GptConfig` (dropout rates are kept for fine-tuning; generation and scoring
        always run in eval mode).
      special_token_ids: names of the special tokens (default train.py's `_start_`,
        `_delimiter_`, `_classify_` = n_vocab, n_vocab+1, n_vocab+2 for 3 specials).
      tokenizer: a `bert_tf.tokenization.gpt_text_encoder.TextEncoder` for text in and out
        (None: token ids only). Not saved in a `.keras` file; `save_pretrained` copies its files.
      jit_compile: XLA-compile the generation loop: True, False, or "auto" (XLA for models of
        10M parameters or more, e.g. the released one; `bert_tf.gpt.generation`).

    Attributes: `transformer` (a `GptModel` without classifier), `config`, `tokenizer`,
    `special_token_ids`, `generator` (the `GptGenerator`).

    `call({"token_ids": int [B, S]})` returns the transformer's {"hidden_states" [B, S, n_embd],
    "lm_logits" [B, S-1, table_rows]} (row i predicts token i+1, as the original).
    """

    def __init__(self, config: GptConfig | Mapping[str, Any],
                 special_token_ids: Mapping[str, int] | None = None, tokenizer: Any = None,
                 jit_compile: bool | str = "auto", **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, GptConfig) else GptConfig.from_dict(config)
        self.transformer = GptModel(self.config, classifier=False, name="transformer")
        self.special_token_ids = dict(special_token_ids or _default_special_names(self.config))
        self.tokenizer = tokenizer
        self._tokenizer_files: tuple[str, str] | None = None
        self.generator = GptGenerator(self.transformer, jit_compile=jit_compile)
        self.built = True

    def call(self, inputs: Mapping[str, Any], training: bool | None = None) -> dict:
        return self.transformer(inputs, training=training)

    def get_config(self) -> dict:
        return {"config": self.config.to_dict(), "special_token_ids": self.special_token_ids,
                "jit_compile": self.generator.jit_compile, "name": self.name,
                "trainable": self.trainable}

    @classmethod
    def from_config(cls, config: dict) -> "GptCausalLM":
        return cls(**config)

    # ---- text <-> ids ----------------------------------------------------------------------
    def _require_tokenizer(self, what: str):
        if self.tokenizer is None:
            raise UserInputError(
                f"{what}: this model has no tokenizer; give token ids, or load the BPE files "
                f"(from_pretrained(..., encoder_path=..., bpe_path=...): {ENCODER_FILE} and "
                f"{BPE_FILE})")
        return self.tokenizer

    def set_tokenizer(self, encoder_path: str | os.PathLike, bpe_path: str | os.PathLike) -> None:
        """Attaches the original BPE `TextEncoder` of these two files; its vocabulary must have
        n_vocab entries (UserInputError otherwise)."""
        from bert_tf.tokenization.gpt_text_encoder import TextEncoder

        encoder = TextEncoder(encoder_path, bpe_path)
        if len(encoder.encoder) != self.config.n_vocab:
            raise UserInputError(
                f"{os.fspath(encoder_path)}: {len(encoder.encoder)} BPE tokens, but the model's "
                f"n_vocab is {self.config.n_vocab}; they must be the same model's files")
        self.tokenizer = encoder
        self._tokenizer_files = (os.fspath(encoder_path), os.fspath(bpe_path))

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Texts -> BPE ids with the original encoder (no special tokens added)."""
        return self._require_tokenizer("text input").encode(list(texts), verbose=False)

    def decode(self, ids: Sequence[int]) -> str:
        """ids -> text (lossy: lower-cased, spaCy's splits); special tokens by their names."""
        tokenizer = self._require_tokenizer("text output")
        names = {v: k for k, v in self.special_token_ids.items()}
        pieces, run = [], []
        for i in ids:
            if int(i) in names:
                if run:
                    pieces.append(tokenizer.decode(run))
                    run = []
                pieces.append(names[int(i)])
            else:
                run.append(int(i))
        if run:
            pieces.append(tokenizer.decode(run))
        return " ".join(p for p in pieces if p)

    def token_id(self, token: int | str) -> int:
        """An id from an int, a special token's name (`_start_`) or a BPE piece (`.` or
        `.</w>`; a piece alone is read as a whole word first)."""
        if isinstance(token, (int, np.integer)):
            return int(token)
        token = str(token)
        if token in self.special_token_ids:
            return self.special_token_ids[token]
        if token.lstrip("-").isdigit():
            return int(token)
        if self.tokenizer is not None:
            for piece in (token + "</w>", token):
                if piece in self.tokenizer.encoder:
                    return self.tokenizer.encoder[piece]
        raise UserInputError(f"stop token {token!r}: not an id, a special token "
                             f"({', '.join(self.special_token_ids)}) or a BPE piece of the "
                             "tokenizer")

    def _as_ids(self, inputs: Any, add_start_token: bool = False
                ) -> tuple[list[list[int]], bool, bool]:
        """-> (id lists, inputs were text, a single input)."""
        if isinstance(inputs, str):
            return self._as_ids([inputs], add_start_token)[0], True, True
        if isinstance(inputs, np.ndarray):
            inputs = inputs.tolist()
        if not isinstance(inputs, Sequence) or not len(inputs):
            raise GenerationInputError("expected a text, a list of texts, a list of token ids or "
                                       f"a list of token-id lists, got {str(inputs)[:60]!r}")
        if all(isinstance(x, str) for x in inputs):
            ids, text, single = self.encode(inputs), True, False
        elif all(isinstance(x, (int, np.integer)) for x in inputs):
            ids, text, single = [list(inputs)], False, True
        else:
            if any(isinstance(x, str) for x in inputs):
                raise GenerationInputError("mixed texts and token ids; give one kind")
            ids, text, single = [list(np.asarray(x).reshape(-1)) for x in inputs], False, False
        if add_start_token:
            start = self.special_token_ids.get("_start_", self.config.n_vocab)
            ids = [[start] + list(s) for s in ids]
        return ids, text, single

    # ---- generation and scoring --------------------------------------------------------------
    def generate(self, inputs: Any, max_length: int | None = None, *,
                 max_new_tokens: int | None = None, sampler: str | Sampler = "greedy",
                 temperature: float = 1.0, top_k: int = 50, top_p: float = 0.9,
                 num_beams: int = 4, length_penalty: float = 0.0, seed: int | None = None,
                 stop_token_ids: Sequence[int | str] = (), allow_special: bool = False,
                 add_start_token: bool = False, strip_prompt: bool = False,
                 return_details: bool = False) -> Any:
        """Continues prompts (keras-hub's `generate(inputs, max_length)`).

        Args:
          inputs: a text, a list of texts (encoded with the tokenizer), a list of token ids or a
            list of token-id lists (different lengths are fine).
          max_length: total length of each sequence, prompt included (capped at n_ctx).
          max_new_tokens: new tokens per prompt (the tighter of the two limits applies;
            without either, generation fills the context up to n_ctx).
          sampler: "greedy", "random", "top_k", "top_p", "beam", or a `Sampler`.
          temperature, top_k, top_p, num_beams, length_penalty: the sampler's parameters
            (`bert_tf.gpt.generation.Sampler`).
          seed: makes random sampling reproducible (same seed, same tokens, in any process).
          stop_token_ids: ids, special-token names or BPE pieces that end a row (kept in the
            output ids, left out of returned text).
          allow_special: let the sampler propose special tokens (never position rows).
          add_start_token: put `_start_` before every prompt.
          strip_prompt: return the generated part only.
          return_details: return the `Generation` (ids, stop flags, beams) instead.

        Returns: texts for text inputs (one str for one str), id lists for id inputs (one list
        for one list), or the `Generation` with `return_details`.
        """
        ids, is_text, single = self._as_ids(inputs, add_start_token)
        if isinstance(sampler, str):
            sampler = Sampler(sampler, temperature=temperature, k=top_k, p=top_p,
                              num_beams=num_beams, length_penalty=length_penalty)
        if max_new_tokens is None and max_length is None:
            max_length = self.config.n_ctx
        stops = [self.token_id(t) for t in stop_token_ids]
        result = self.generator.generate(ids, max_new_tokens=max_new_tokens,
                                         max_length=max_length, sampler=sampler, seed=seed,
                                         stop_token_ids=stops, allow_special=allow_special)
        if return_details:
            return result
        stop_set = set(stops)
        outputs = []
        for seq, gen, stopped in zip(result.sequences, result.generated, result.stopped):
            keep = gen if strip_prompt else seq
            if is_text:
                if stopped and keep and keep[-1] in stop_set:
                    keep = keep[:-1]
                outputs.append(self.decode(keep))
            else:
                outputs.append(list(keep))
        return outputs[0] if single else outputs

    def score(self, inputs: Any, *, add_start_token: bool = False, batch_size: int = 4) -> Scores:
        """Per-token log-probabilities, perplexities and next-token logits (`Scores`) of texts
        or token-id lists; x[0] is not scored unless `add_start_token` puts `_start_` first."""
        ids, _, single = self._as_ids(inputs, add_start_token)
        return self.generator.score(ids, batch_size=batch_size)

    # ---- loading and saving ------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path_or_preset: str | os.PathLike, *,
                        config: GptConfig | str | os.PathLike | None = None,
                        encoder_path: str | os.PathLike | None = None,
                        bpe_path: str | os.PathLike | None = None,
                        special_rows_seed: int | None = None, with_tokenizer: bool = True,
                        jit_compile: bool | str = "auto") -> "GptCausalLM":
        """A `GptCausalLM` from any of the layouts of the module docstring.

        Args:
          path_or_preset: a `.keras` file, a folder, a checkpoint prefix, or "openai-gpt".
          config: a `GptConfig` or a config file, instead of the folder's `config.json` / the
            preset.
          encoder_path, bpe_path: the BPE files (default: found beside the weights).
          special_rows_seed: draws the special-token rows when no `special_rows.npy` exists
            (default: the config.json's `seed`, else 42).
          with_tokenizer: False: ids only (the BPE files are not looked for).
          jit_compile: XLA-compile the generation loop (True, False, "auto").
        """
        name = os.fspath(path_or_preset)
        explicit = None
        extras: dict[str, Any] = {}
        if isinstance(config, GptConfig):
            explicit = config
        elif config is not None:
            explicit, extras = read_gpt_config_json(config)
        if name.endswith(".keras") and io_utils.isfile(name):
            model = cls._from_keras_file(name, jit_compile)
            search = [os.path.dirname(name) or "."]
        elif io_utils.isdir(name) and _params_folder(name):
            params = _params_folder(name)
            search = list(dict.fromkeys([params, name]))
            cfg = explicit
            if cfg is None:
                found = [os.path.join(d, CONFIG_FILE) for d in search
                         if io_utils.exists(os.path.join(d, CONFIG_FILE))]
                if found:
                    cfg, extras = read_gpt_config_json(found[0])
                    logging.info("GPT-1 config: %s", found[0])
                else:
                    cfg = preset_gpt_config("openai-gpt")
                    logging.info("%s has no %s: using the preset openai-gpt (the released "
                                 "model's hyper-parameters)", name, CONFIG_FILE)
            model = cls(cfg, special_token_ids=extras.get("special_token_ids"),
                        jit_compile=jit_compile)
            model._load_original(params, extras, special_rows_seed)
        elif _is_tf_checkpoint(name):
            folder = name if io_utils.isdir(name) else os.path.dirname(name)
            cfg = explicit
            if cfg is None:
                candidates = [os.path.join(folder, CONFIG_FILE),
                              os.path.join(os.path.dirname(folder), CONFIG_FILE)]
                found = [c for c in candidates if io_utils.exists(c)]
                if not found:
                    raise UserInputError(f"{name}: a TensorFlow checkpoint without a "
                                         f"{CONFIG_FILE} beside it; pass config= (the "
                                         "--gpt_config_file of the run)")
                cfg, extras = read_gpt_config_json(found[0])
            from bert_tf.runs.gpt_pretraining import load_gpt_weights

            model = cls(cfg, special_token_ids=extras.get("special_token_ids"),
                        jit_compile=jit_compile)
            load_gpt_weights(model.transformer, name)
            search = [folder]
        elif not io_utils.exists(name) and name in PRESETS:
            model = cls(explicit or preset_gpt_config(name), jit_compile=jit_compile)
            logging.warning("preset %s: randomly initialised weights (bert_tf ships no GPT-1 "
                            "weights; pass the folder of OpenAI's release for them)", name)
            search = []
        else:
            raise UserInputError(
                f"{name!r} is not a GPT-1 model bert_tf can load: looked for a .keras file, a "
                f"folder with {SHAPES_FILE} + params_0..9.npy (OpenAI's layout; also in its model/ "
                f"or original_params/ subfolder), a GPT pretraining checkpoint, or a preset "
                f"({', '.join(PRESETS)})")
        if with_tokenizer:
            model._find_tokenizer(encoder_path, bpe_path, search)
        return model

    @classmethod
    def _from_keras_file(cls, path: str, jit_compile: bool | str) -> "GptCausalLM":
        try:
            loaded = keras.models.load_model(path)
        except (OSError, ValueError) as e:
            raise UserInputError(f"cannot load the Keras model file {path}: {e}") from e
        if isinstance(loaded, cls):
            loaded.generator = GptGenerator(loaded.transformer, jit_compile=jit_compile)
            return loaded
        transformer = getattr(loaded, "transformer", loaded)
        if not isinstance(transformer, GptModel):
            raise UserInputError(f"{path} holds a {type(loaded).__name__}, not a GPT-1 model")
        model = cls(transformer.config, jit_compile=jit_compile)
        source = dict(transformer.original_variables())
        for name, variable in model.transformer.original_variables():
            variable.assign(source[name])
        return model

    def _load_original(self, params: str, extras: Mapping[str, Any],
                       special_rows_seed: int | None) -> None:
        c = self.config
        seed = special_rows_seed if special_rows_seed is not None else extras.get(
            "seed", DEFAULT_SPECIAL_ROWS_SEED)
        n_transfer = extras.get("n_transfer", c.n_layer)
        load_original_params(self.transformer, params, n_transfer=n_transfer, seed=seed)
        rows_file = load_special_rows(self.transformer, params)
        if rows_file:
            logging.info("special-token rows read from %s", rows_file)
        else:
            logging.info("special-token rows drawn as train.py draws them, seed %d (no %s in %s)",
                         seed, SPECIAL_ROWS_FILE, params)

    def _find_tokenizer(self, encoder_path, bpe_path, search: Sequence[str]) -> None:
        if encoder_path is not None or bpe_path is not None:
            if encoder_path is None or bpe_path is None:
                raise UserInputError("give both encoder_path and bpe_path (the two BPE files)")
            self.set_tokenizer(encoder_path, bpe_path)
            return
        for folder in search:
            enc, bpe = os.path.join(folder, ENCODER_FILE), os.path.join(folder, BPE_FILE)
            if io_utils.exists(enc) and io_utils.exists(bpe):
                try:
                    self.set_tokenizer(enc, bpe)
                except UserInputError as e:
                    logging.warning("not using the BPE files found: %s", e)
                return

    def save_pretrained(self, folder: str | os.PathLike, overwrite: bool = False) -> None:
        """Writes `config.json`, OpenAI's `params_shapes.json` + `params_0..9.npy` (which
        train.py reads), `special_rows.npy` and, with a tokenizer, copies of its two BPE files.
        Refuses to overwrite existing files unless `overwrite`."""
        folder = os.fspath(folder)
        targets = [os.path.join(folder, n) for n in (CONFIG_FILE, SPECIAL_ROWS_FILE)]
        if self._tokenizer_files:
            targets += [os.path.join(folder, ENCODER_FILE), os.path.join(folder, BPE_FILE)]
        existing = [t for t in targets if io_utils.exists(t)]
        if existing and not overwrite:
            raise UserInputError(f"{existing[0]}: exists; refusing to overwrite (pass "
                                 "overwrite=True)")
        # params + config.json + special_rows.npy, as a GPT pretraining run writes them
        write_original_outputs(self.transformer, folder, overwrite=overwrite)
        if self._tokenizer_files:
            for source, name in zip(self._tokenizer_files, (ENCODER_FILE, BPE_FILE)):
                if os.path.abspath(source) != os.path.abspath(os.path.join(folder, name)):
                    shutil.copyfile(source, os.path.join(folder, name))


    def export(self, export_dir: str | os.PathLike, version: int = 1, *,
               stop_token_ids: Sequence[int | str] = (), add_start_token: bool = False,
               bpe_corpus: Sequence[str] = (), overwrite: bool = False) -> str:
        """A serving SavedModel with `generate`, `generate_sampled`, `score` (raw text, with a
        tokenizer) and `generate_ids`, `generate_ids_sampled`, `score_ids` signatures
        (`bert_tf.export.gpt_lm`), as `<export_dir>/<version>/`, checked servable; returns
        the folder. Its greedy and sampled continuations and scores are this model's
        `generate` / `score` (the same ids; 1e-5).

        Args:
          stop_token_ids: ids, special-token names or BPE pieces that end a continuation
            (fixed at export).
          add_start_token: put `_start_` before every text (fixed at export).
          bpe_corpus: texts like the served ones: their chunks that the in-graph BPE's rules
            would split otherwise than spaCy go into its chunk table (docs/gpt_tokenization.md).
          overwrite: replace an existing version.
        """
        from bert_tf.export.gpt_lm import export_gpt_causal_lm_savedmodel

        encoder_path, bpe_path = self._tokenizer_files or (None, None)
        return export_gpt_causal_lm_savedmodel(
            self.transformer, os.fspath(export_dir), version, overwrite=overwrite,
            encoder_path=encoder_path, bpe_path=bpe_path, bpe_corpus=list(bpe_corpus),
            text_encoder=self.tokenizer, special_token_ids=self.special_token_ids,
            stop_token_ids=[self.token_id(t) for t in stop_token_ids],
            add_start_token=add_start_token)


# ---- the command-line tools (tools/generate.py, tools/score.py) ---------------------------------
@dataclasses.dataclass(kw_only=True)
class _ModelOptions:
    model: str = option(help="The GPT-1 model: OpenAI's params folder (params_shapes.json + "
                             "params_0..9.npy, BPE files beside them), a save_pretrained folder, "
                             "a .keras file, a GPT pretraining checkpoint, or the preset "
                             "openai-gpt (random weights).")
    gpt_config_file: str | None = option(None, "GptConfig JSON instead of the folder's "
                                               "config.json (or the openai-gpt preset).")
    encoder_path: str | None = option(None, "The BPE encoder (encoder_bpe_40000.json); default: "
                                            "the one beside the weights.")
    bpe_path: str | None = option(None, "The BPE merges (vocab_40000.bpe); with --encoder_path.")
    special_rows_seed: int | None = option(None, "Seed of the special-token rows when the "
                                                 "folder has no special_rows.npy (default: "
                                                 "config.json's seed, else train.py's 42).")
    add_start_token: bool = option(False, "Put the _start_ token before every text.")


@dataclasses.dataclass(kw_only=True)
class GenerateOptions(_ModelOptions):
    """Options of tools/generate.py (one JSON line per prompt on --output_file)."""

    prompt: list[str] | None = option(None, "A prompt text (repeat the flag for several).",
                                      multi=True)
    prompt_file: str | None = option(None, "Prompts, one per line (blank lines skipped), or a "
                                           ".jsonl file of {\"prompt\": text} or {\"ids\": [...]}.")
    prompt_ids: list[str] | None = option(None, "A prompt as comma-separated token ids (repeat "
                                                "for several).", multi=True)
    output_file: str = option("-", "JSONL output ('-': stdout): prompt, ids, generated ids, "
                                   "text, stopped. An existing file is not overwritten.")
    max_length: int | None = option(None, "Total length of each sequence, prompt included "
                                          "(default: n_ctx).")
    max_new_tokens: int | None = option(None, "New tokens per prompt.")
    sampler: str = option("greedy", "How the next token is chosen.", choices=SAMPLERS)
    temperature: float = option(1.0, "Sampling temperature (random, top_k, top_p).")
    top_k: int = option(50, "k of the top_k sampler.")
    top_p: float = option(0.9, "p of the top_p sampler.")
    num_beams: int = option(4, "Beam width of the beam sampler.")
    length_penalty: float = option(0.0, "Beam search: best = max score / length**penalty.")
    seed: int | None = option(None, "Seed of the random samplers (reproducible output).")
    stop_tokens: list[str] = option([], "Tokens that end a continuation: ids, special-token "
                                        "names (_classify_) or BPE pieces ('.', '\\n').")
    allow_special: bool = option(False, "Let the sampler propose special tokens.")
    batch_size: int = option(8, "Prompts per generation call.")
    jit_compile: str = option("auto", "XLA-compile the generation loop (auto: for models of "
                                      "10M parameters or more).", choices=["auto", "true", "false"])


@dataclasses.dataclass(kw_only=True)
class ScoreOptions(_ModelOptions):
    """Options of tools/score.py."""

    input_file: str = option(help="The text file to score.")
    per_line: bool = option(False, "Score each non-blank line as its own text (one JSON line "
                                   "each on --output_file) instead of the file as one text.")
    output_file: str | None = option(None, "JSONL of per-window (or per-line) scores; an "
                                           "existing file is not overwritten.")
    batch_size: int = option(4, "Windows per forward pass.")


def _load_for_tool(opts: _ModelOptions, needs_tokenizer: bool, jit_compile: bool | str = "auto"
                   ) -> GptCausalLM:
    model = GptCausalLM.from_pretrained(opts.model, config=opts.gpt_config_file,
                                        encoder_path=opts.encoder_path, bpe_path=opts.bpe_path,
                                        special_rows_seed=opts.special_rows_seed,
                                        jit_compile=jit_compile)
    if needs_tokenizer and model.tokenizer is None:
        raise UserInputError(f"--model={opts.model}: no BPE files found beside the weights; pass "
                             f"--encoder_path and --bpe_path ({ENCODER_FILE}, {BPE_FILE})")
    return model


def _read_prompts(opts: GenerateOptions) -> list[tuple[str | None, list[int] | None]]:
    prompts: list[tuple[str | None, list[int] | None]] = [(t, None) for t in opts.prompt or []]
    for text in opts.prompt_ids or []:
        try:
            prompts.append((None, [int(x) for x in text.split(",") if x.strip()]))
        except ValueError:
            raise UserInputError(f"--prompt_ids={text!r}: expected comma-separated integers") \
                from None
    if opts.prompt_file:
        if not io_utils.exists(opts.prompt_file):
            raise UserInputError(f"--prompt_file={opts.prompt_file}: no such file")
        lines = io_utils.read_text(opts.prompt_file).splitlines()
        jsonl = opts.prompt_file.endswith(".jsonl")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if not jsonl:
                prompts.append((line, None))
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserInputError(f"{opts.prompt_file}:{number}: not valid JSON: {e.msg}") \
                    from None
            if isinstance(record, Mapping) and isinstance(record.get("prompt"), str):
                prompts.append((record["prompt"], None))
            elif isinstance(record, Mapping) and isinstance(record.get("ids"), list):
                prompts.append((None, record["ids"]))
            else:
                raise UserInputError(f"{opts.prompt_file}:{number}: expected {{\"prompt\": text}}"
                                     " or {\"ids\": [token ids]}")
    if not prompts:
        raise UserInputError("no prompt: give --prompt, --prompt_ids or --prompt_file")
    return prompts


class _Output:
    """--output_file: '-' is stdout; a file is written whole at the end, never over an old one."""

    def __init__(self, path: str | None):
        self.path = path
        if path and path != "-" and io_utils.exists(path):
            raise UserInputError(f"--output_file={path}: exists; refusing to overwrite it")
        self.lines: list[str] = []

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False)
        if self.path == "-":
            print(line, flush=True)
        else:
            self.lines.append(line)

    def close(self) -> None:
        if self.path and self.path != "-":
            io_utils.atomic_write_text(self.path, "".join(l + "\n" for l in self.lines))


def run_generate(opts: GenerateOptions) -> int:
    """tools/generate.py: continues every prompt; returns the number of prompts."""
    prompts = _read_prompts(opts)
    output = _Output(opts.output_file)
    model = _load_for_tool(opts, needs_tokenizer=any(t is not None for t, _ in prompts),
                           jit_compile=opts.jit_compile)
    if opts.batch_size < 1:
        raise UserInputError(f"--batch_size={opts.batch_size}: must be >= 1")
    stops = [model.token_id("\n" if t == "\\n" else t) for t in opts.stop_tokens]
    sampler = Sampler(opts.sampler, temperature=opts.temperature, k=opts.top_k, p=opts.top_p,
                      num_beams=opts.num_beams, length_penalty=opts.length_penalty)
    ids = []
    for text, prompt_ids in prompts:
        ids.append(model._as_ids(text if prompt_ids is None else prompt_ids,
                                 opts.add_start_token)[0][0])
    max_length = opts.max_length
    if max_length is None and opts.max_new_tokens is None:
        max_length = model.config.n_ctx
    for begin in range(0, len(prompts), opts.batch_size):
        batch = ids[begin:begin + opts.batch_size]
        seed = None if opts.seed is None else opts.seed + begin
        result = model.generator.generate(
            batch, max_new_tokens=opts.max_new_tokens, max_length=max_length, sampler=sampler,
            seed=seed, stop_token_ids=stops, allow_special=opts.allow_special)
        for n, (seq, gen, stopped) in enumerate(zip(result.sequences, result.generated,
                                                    result.stopped)):
            text, _ = prompts[begin + n]
            record: dict[str, Any] = {"index": begin + n, "prompt": text,
                                      "prompt_ids": batch[n], "generated_ids": gen,
                                      "stopped": stopped}
            if model.tokenizer is not None:
                shown = gen[:-1] if stopped and gen and gen[-1] in stops else gen
                record["generated_text"] = model.decode(shown)
            if result.beams is not None:
                record["beam_score"] = result.beams[n][0][1]
            output.write(record)
    output.close()
    return len(prompts)


def _file_ids(model: GptCausalLM, path: str) -> list[int]:
    """The whole text file's ids: encoded in pieces of at most ~100,000 characters cut at line
    ends (spaCy's limit is 1,000,000), joined by the newline token as the whole text would
    have it."""
    text = io_utils.read_text(path)
    newline = model.tokenizer.encoder.get("\n</w>")
    pieces, current, size = [], [], 0
    for line in text.splitlines():
        if size > 100_000 and line.strip():
            pieces.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    pieces.append("\n".join(current))
    ids: list[int] = []
    for piece in pieces:
        encoded = model.encode([piece])[0]
        if ids and encoded and newline is not None:
            ids.append(newline)
        ids.extend(encoded)
    return ids


def run_score(opts: ScoreOptions) -> dict[str, Any]:
    """tools/score.py: perplexity of a text file under the three softmaxes of
    `bert_tf.gpt.generation` (full_table = the original LM loss). The file is cut into
    consecutive windows of n_ctx tokens (as GPT-1's LM data); each window's first token is
    context only. Prints and returns the summary."""
    if not io_utils.exists(opts.input_file):
        raise UserInputError(f"--input_file={opts.input_file}: no such file")
    output = _Output(opts.output_file)
    model = _load_for_tool(opts, needs_tokenizer=True)
    n_ctx = model.config.n_ctx
    if opts.per_line:
        texts = [line for line in io_utils.read_text(opts.input_file).splitlines()
                 if line.strip()]
        units = [s for s in model.encode(texts)]
        if opts.add_start_token:
            units = [[model.special_token_ids.get("_start_", model.config.n_vocab)] + u
                     for u in units]
        empty = [n for n, u in enumerate(units) if not u]
        if empty:
            raise UserInputError(f"{opts.input_file}: line {empty[0] + 1} gives no tokens")
        too_long = [n for n, u in enumerate(units) if len(u) > n_ctx]
        if too_long:
            raise UserInputError(f"{opts.input_file}: text {too_long[0] + 1} has "
                                 f"{len(units[too_long[0]])} tokens; at most n_ctx {n_ctx} fit")
    else:
        ids = _file_ids(model, opts.input_file)
        if opts.add_start_token:
            ids = [model.special_token_ids.get("_start_", model.config.n_vocab)] + ids
        if len(ids) < 2:
            raise UserInputError(f"{opts.input_file}: fewer than 2 tokens; nothing to score")
        units = [ids[i:i + n_ctx] for i in range(0, len(ids), n_ctx)]
        units = [u for u in units if len(u) > 1] or units[:1]
    scores = model.generator.score(units, batch_size=opts.batch_size)
    totals = {kind: 0.0 for kind in SCORE_KINDS}
    count = 0
    for n, unit in enumerate(units):
        for kind in SCORE_KINDS:
            totals[kind] += float(np.sum(getattr(scores, kind)[n]))
        count += len(unit) - 1
        record = {"index": n, "tokens": len(unit), "predicted": len(unit) - 1,
                  **{f"logprob_sum_{k}": float(np.sum(getattr(scores, k)[n]))
                     for k in SCORE_KINDS},
                  **{f"perplexity_{k}": scores.perplexity[n][k] for k in SCORE_KINDS}}
        output.write(record)
    output.close()
    summary = {"input_file": opts.input_file, "units": len(units),
               "unit": "line" if opts.per_line else f"window of {n_ctx} tokens",
               "tokens": int(sum(len(u) for u in units)), "predicted_tokens": count,
               **{f"perplexity_{k}": (math.exp(-totals[k] / count) if count else math.nan)
                  for k in SCORE_KINDS},
               "softmax": {"full_table": "over every row of the table: the original LM loss",
                           "tokens_and_specials": "over BPE tokens and special tokens",
                           "tokens_only": "over BPE tokens only"}}
    print(json.dumps(summary, indent=1), file=sys.stdout if opts.output_file != "-"
          else sys.stderr)
    return summary
