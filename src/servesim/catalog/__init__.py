"""Catalogs of model architectures and accelerators."""

from servesim.catalog.gpus import GpuSpec, get_gpu, list_gpus
from servesim.catalog.hf_config import from_hf_config, list_models, load_model
from servesim.catalog.models import ModelSpec

__all__ = ["GpuSpec", "ModelSpec", "from_hf_config", "get_gpu", "list_gpus", "list_models", "load_model"]
