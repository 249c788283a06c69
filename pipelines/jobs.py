"""Jobs of the document-format study.

* ``format_robustness_inputs_job`` — source_instances, rendered_documents (unpartitioned);
* ``format_robustness_model_job`` — everything downstream of the documents for ONE model
  partition (generations, extraction, evidence categories) and the cross-model metric tables,
  which re-read all partitions. Sensors and schedules launch this job per model.
"""

import dagster as dg

GROUP = "format_robustness"
INPUT_ASSETS = dg.AssetSelection.assets(["format_robustness", "source_instances"],
                                        ["format_robustness", "rendered_documents"])

format_robustness_inputs_job = dg.define_asset_job(
    "format_robustness_inputs_job", selection=INPUT_ASSETS,
    description="Load the source datasets and render every record in every format.")

format_robustness_model_job = dg.define_asset_job(
    "format_robustness_model_job", selection=dg.AssetSelection.groups(GROUP) - INPUT_ASSETS,
    description="Generate, extract and score one model partition, then rebuild the metric tables.")
