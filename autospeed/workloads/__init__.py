"""Workloads: what is trained. Built-ins and `package.module:factory` plugins."""

from autospeed.workloads._builtin import ConvNet
from autospeed.workloads._cache import CACHE_ENV, cache_dir
from autospeed.workloads._registry import (
    BUILTIN,
    check_options,
    describe,
    load_workload,
    load_workload_once,
    offered_metrics,
    resolve_factory,
)
from autospeed.workloads.base import CLASSIFICATION_METRICS, Metric, Workload, check_target

__all__ = ["BUILTIN", "CACHE_ENV", "CLASSIFICATION_METRICS", "ConvNet", "Metric", "Workload", "cache_dir",
           "check_options", "check_target", "describe", "load_workload", "load_workload_once",
           "offered_metrics", "resolve_factory"]
