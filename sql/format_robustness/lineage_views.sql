-- Lineage views: from any metric cell back to the exact prompt and raw completion.
-- Run against the warehouse after the study's tables exist (asset format_robustness/lineage_views).

-- Every extracted decision with its raw completion, the exact request, the document and the record.
CREATE OR REPLACE VIEW format_robustness.decision_lineage AS
SELECT
    d.model_id, d.workflow_id, d.dataset, d.instance_id, d.format, d.repeat,
    d.decision, d.parse_status, d.parse_reason, d.truncated, d.gold, d.is_correct, d.evidence_json, d.echoed_json,
    g.generation_key, g.response_text, g.finish_reason, g.request_json, g.model_version, g.cache_hit, g.error,
    r.document_sha256, r.renderer_version, r.media_type, r.document_text,
    s.task_prompt, s.source
FROM format_robustness.extracted_decisions AS d
JOIN format_robustness.workflow_generations AS g
  USING (model_id, workflow_id, dataset, instance_id, format, repeat)
JOIN format_robustness.rendered_documents AS r USING (dataset, instance_id, format)
JOIN format_robustness.source_instances AS s USING (dataset, instance_id);

-- Groups behind an MR violation rate: one row per violating group (instance, repeat) × format.
CREATE OR REPLACE VIEW format_robustness.mr_violation_lineage AS
SELECT f.mr1, f.mr2, f.mr3, l.*
FROM format_robustness.mr_flags AS f
JOIN format_robustness.decision_lineage AS l USING (workflow_id, dataset, instance_id, repeat)
WHERE f.mr1 OR f.mr2 OR f.mr3;
