"""What the worker scripts of tests/training (`_*_worker.py`, each run in a fresh process) do
first, before anything else touches TensorFlow: the logical CPU devices a strategy spreads over,
or MultiWorkerMirroredStrategy's collectives, can only be set up then."""
import tensorflow as tf


def set_up_devices(strategy_name: str, n_cpu: int):
    """For "multi_worker_mirrored": makes and returns the MultiWorkerMirroredStrategy (its
    collectives must exist before anything else; TF_CONFIG names the workers). Otherwise splits
    the first physical CPU into `n_cpu` logical devices and returns None."""
    if strategy_name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n_cpu)])
    return None
