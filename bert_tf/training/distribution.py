"""tf.distribute strategies by name, with early, clear errors for the common mistakes."""
from __future__ import annotations

import os
from typing import Callable, Sequence

import tensorflow as tf

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")


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
            raise ValueError("--distribution_strategy=multi_worker_mirrored needs the TF_CONFIG "
                             "environment variable (cluster and task of this worker)")
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        if not (tpu_name or master):
            raise ValueError("--distribution_strategy=tpu (or --use_tpu) needs --tpu_name or --master")
        factory = tpu_resolver_factory or tf.distribute.cluster_resolver.TPUClusterResolver
        resolver = factory(tpu=tpu_name or master, zone=tpu_zone, project=gcp_project)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"unknown distribution strategy {name!r}; expected one of {STRATEGIES}")


def check_global_batch(global_batch_size: int, strategy: tf.distribute.Strategy,
                       flag: str = "--train_batch_size") -> int:
    """Per-replica batch size; raises if the global batch does not split evenly."""
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(f"{flag}={global_batch_size} is not divisible by the {replicas} replicas "
                         f"of the {type(strategy).__name__}")
    return global_batch_size // replicas


def check_tpu_paths(paths: Sequence[str], what: str) -> None:
    """TPUs read and write through Cloud Storage only: local paths are an error."""
    for p in paths:
        if p and not p.startswith("gs://"):
            raise ValueError(f"{what} {p!r} is a local path; a TPU worker cannot see it. Use a "
                             "gs:// path")
