"""Partitions shared by every study.

``model_partitions``: one dynamic partition per registry model id. Every per-model asset of every
study uses this one definition, so registering a model adds partitions instead of recomputing.
"""

import dagster as dg

MODEL_PARTITIONS_NAME = "model"
model_partitions = dg.DynamicPartitionsDefinition(name=MODEL_PARTITIONS_NAME)
