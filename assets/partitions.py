"""Partitions shared by every study (the asset modules and ``pipelines`` import them from here).

``model_partitions``: one dynamic partition per registry model id. Every per-model asset of every
study uses this one definition, so registering a model adds partitions instead of recomputing.
"""

import dagster as dg

MODEL_PARTITIONS_NAME = "model"
model_partitions = dg.DynamicPartitionsDefinition(name=MODEL_PARTITIONS_NAME)

#: Definition metadata of a per-model table: the IO manager deletes and loads its rows by the
#: partition key, stored in column ``model_id``.
PER_MODEL = {"partition_expr": "model_id"}
