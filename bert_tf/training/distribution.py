"""tf.distribute strategies by name, with early, clear errors for the common mistakes."""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Sequence

import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.options import option
from bert_tf.training.precision import PRECISION_POLICIES

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")


@dataclasses.dataclass(kw_only=True)
class DistributionOptions:
    """Where a run trains: the original scripts' TPU flags plus `--distribution_strategy`, and how
    it computes there (`--mixed_precision`, `bert_tf.training.precision`).

    Shared by every pretraining and fine-tuning run's options (they inherit it), so the flags are
    declared once. `strategy_name` resolves `--use_tpu`; `create_strategy_from_options` builds
    the `tf.distribute.Strategy`.
    """

    distribution_strategy: str = option(
        "one_device", "tf.distribute strategy: one_device (first GPU, else CPU), mirrored (all "
        "local GPUs), multi_worker_mirrored (hosts from TF_CONFIG) or tpu.", choices=STRATEGIES)
    use_tpu: bool = option(False, "Whether to use TPU (the original's flag; same as "
                           "--distribution_strategy=tpu).")
    tpu_name: str | None = option(None, "The Cloud TPU to use for training: the name used when "
                                  "creating the Cloud TPU, or a grpc://ip.address.of.tpu:8470 url.")
    tpu_zone: str | None = option(None, "[Optional] GCE zone where the Cloud TPU is located in "
                                  "(detected from metadata when not given).")
    gcp_project: str | None = option(None, "[Optional] Project name for the Cloud TPU-enabled "
                                     "project (detected from metadata when not given).")
    master: str | None = option(None, "[Optional] TensorFlow master URL (used for the TPU when "
                                "--tpu_name is not given).")
    num_tpu_cores: int = option(8, "Only used if --use_tpu is True; the TPU system reports its "
                                "cores, a different count is logged.")
    iterations_per_loop: int = option(1000, "How many steps to run per host loop (and per "
                                      "progress line).")
    mixed_precision: str = option(
        "float32", "Keras mixed-precision policy: float32, mixed_bfloat16 (16-bit compute, float32 "
        "variables and losses) or mixed_float16 (pretraining only: it adds dynamic loss "
        "scaling).", choices=PRECISION_POLICIES)

    @property
    def strategy_name(self) -> str:
        """`--distribution_strategy`, or "tpu" with `--use_tpu`."""
        return "tpu" if self.use_tpu else self.distribution_strategy


def create_strategy_from_options(opts: DistributionOptions, **kwargs) -> tf.distribute.Strategy:
    """`create_strategy` with the flags of `opts` (kwargs: `devices`, `tpu_resolver_factory`)."""
    return create_strategy(opts.strategy_name, tpu_name=opts.tpu_name, tpu_zone=opts.tpu_zone,
                           gcp_project=opts.gcp_project, master=opts.master, **kwargs)


def create_strategy(name: str, tpu_name: str | None = None, tpu_zone: str | None = None,
                    gcp_project: str | None = None, master: str | None = None,
                    devices: Sequence[str] | None = None,
                    tpu_resolver_factory: Callable | None = None) -> tf.distribute.Strategy:
    """Builds a strategy.

    Args:
      name: "one_device" (first GPU, else CPU), "mirrored" (all local GPUs, or `devices`),
        "multi_worker_mirrored" (hosts from TF_CONFIG), or "tpu".
      tpu_name, tpu_zone, gcp_project, master: the original's TPU flags (`master` is a grpc://
        address used when `tpu_name` is not given).
      devices: explicit device list for "mirrored" (e.g. two logical CPUs in tests).
      tpu_resolver_factory: replaces `tf.distribute.cluster_resolver.TPUClusterResolver` (tests).
    """
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices=list(devices) if devices else None)
    if name == "multi_worker_mirrored":
        if "TF_CONFIG" not in os.environ:
            raise UserInputError("--distribution_strategy=multi_worker_mirrored needs the TF_CONFIG "
                             "environment variable (cluster and task of this worker)")
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        if not (tpu_name or master):
            raise UserInputError("--distribution_strategy=tpu (or --use_tpu) needs --tpu_name or --master")
        factory = tpu_resolver_factory or tf.distribute.cluster_resolver.TPUClusterResolver
        flag = f"--tpu_name={tpu_name}" if tpu_name else f"--master={master}"
        try:
            resolver = factory(tpu=tpu_name or master, zone=tpu_zone, project=gcp_project)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (OSError, ValueError, RuntimeError, tf.errors.OpError) as e:
            # urllib's URLError (no GCE metadata server / DNS) is an OSError.
            reason = " ".join(str(e).split())[:200]
            raise UserInputError(f"{flag}: cannot reach the TPU ({type(e).__name__}: {reason}); "
                                 "run on a Cloud TPU VM or give a reachable --tpu_name/--master"
                                 ) from e
        return tf.distribute.TPUStrategy(resolver)
    raise UserInputError(f"unknown distribution strategy {name!r}; expected one of {STRATEGIES}")


def check_global_batch(global_batch_size: int, strategy: tf.distribute.Strategy,
                       flag: str = "--train_batch_size") -> int:
    """Per-replica batch size; raises if the global batch does not split evenly."""
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise UserInputError(f"{flag}={global_batch_size} is not divisible by the {replicas} replicas "
                         f"of the {type(strategy).__name__}")
    return global_batch_size // replicas


def check_tpu_paths(paths: Sequence[str], what: str) -> None:
    """TPUs read and write through Cloud Storage only: local paths are an error."""
    for p in paths:
        if p and not p.startswith("gs://"):
            raise UserInputError(f"{what} {p!r} is a local path; a TPU worker cannot see it. Use a "
                             "gs:// path")


def resolve_strategy(distribution: Any = None) -> tf.distribute.Strategy:
    """The strategy a run uses, from what the caller has.

    Args:
      distribution: None (the current strategy: the default one-device strategy outside any
        `strategy.scope()`); a `tf.distribute.Strategy`; a strategy name (see `STRATEGIES`); or an
        options object with the original's flags as attributes (`use_tpu`, `tpu_name`,
        `tpu_zone`, `gcp_project`, `master`, optionally `distribution_strategy`): `use_tpu` (or
        `distribution_strategy="tpu"`) builds a TPUStrategy, else the named strategy, else the
        current one.
    """
    if distribution is None:
        return tf.distribute.get_strategy()
    if isinstance(distribution, tf.distribute.Strategy):
        return distribution
    if isinstance(distribution, str):
        return create_strategy(distribution)
    get = lambda name: getattr(distribution, name, None)  # noqa: E731
    name = "tpu" if get("use_tpu") else get("distribution_strategy")
    if not name or name == "one_device":  # TF's default strategy: one device, GPU if any
        return tf.distribute.get_strategy()
    return create_strategy(name, tpu_name=get("tpu_name"), tpu_zone=get("tpu_zone"),
                           gcp_project=get("gcp_project"), master=get("master"))


def is_tpu_strategy(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` runs on TPUs."""
    return isinstance(strategy, (tf.distribute.TPUStrategy,
                                 tf.distribute.experimental.TPUStrategy))


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True except on the non-chief workers of a multi-worker strategy (only the chief writes
    checkpoints, summaries and results)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def check_model_in_scope(model, strategy: tf.distribute.Strategy) -> None:
    """Raises ValueError when `model`'s variables were not created under `strategy.scope()`
    (they would live on one device only and the replicas could not update them)."""
    if not strategy.extended._in_multi_worker_mode() and strategy.num_replicas_in_sync == 1 \
            and not is_tpu_strategy(strategy):
        return
    variables = list(model.trainable_variables)
    if variables and not strategy.extended.variable_created_in_scope(tf_variable(variables[0])):
        raise ValueError(f"the model's variables were not created under the "
                         f"{type(strategy).__name__}'s scope: create (and build) the model inside "
                         "`with strategy.scope():`")


def tf_variable(variable) -> tf.Variable:
    """The tf.Variable (or distributed variable) behind a Keras variable (a tf.Variable as is)."""
    return variable if isinstance(variable, tf.Variable) else variable.value
