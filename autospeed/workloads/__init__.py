"""Workloads: what is trained. Built-ins and `package.module:factory` plugins."""

from autospeed.workloads._cache import CACHE_ENV, cache_dir
from autospeed.workloads._registry import BUILTIN, check_options, describe, load_workload, resolve_factory
from autospeed.workloads.base import ConvNet, Workload

__all__ = ["BUILTIN", "CACHE_ENV", "ConvNet", "Workload", "cache_dir", "check_options", "describe",
           "load_workload", "resolve_factory"]
