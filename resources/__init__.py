"""Dagster resources: storage (DuckDB IO manager), the generation cache, the model registry
and its provider clients. Each wraps a piece of the pure ``metamorph`` library."""

from resources.llm import EncoderResource, GenerationCacheResource, ModelRegistryResource
from resources.paths import cache_path, data_dir, registry_path, warehouse_path
from resources.storage import SafeDuckDBPandasIOManager, WarehouseResource

__all__ = [
    "EncoderResource",
    "GenerationCacheResource",
    "ModelRegistryResource",
    "SafeDuckDBPandasIOManager",
    "WarehouseResource",
    "cache_path",
    "data_dir",
    "registry_path",
    "warehouse_path",
]
