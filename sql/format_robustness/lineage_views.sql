-- Lineage views: from any metric cell back to the exact prompt and raw completion.
-- Run against the warehouse after the study's tables exist (asset format_robustness/lineage_views).

-- Every extracted decision of a registry model (a model removed from the registry or whose partition
-- was removed is left out, as from the metric tables; lineage_models names it) with its raw completion, the exact request, the document and the record;
-- with how the document reached the model: the ingestion path, the file name and media type a file
-- path sent, the named extraction whose text an inline model read from a binary file, and the text
-- a workflow under test reported having extracted from its upload (extracted_text).
CREATE OR REPLACE VIEW format_robustness.decision_lineage AS
SELECT
    d.model_id, d.workflow_id, d.dataset, d.instance_id, d.format, d.repeat,
    d.decision, d.parse_status, d.parse_reason, d.truncated, d.gold, d.is_correct, d.evidence_json, d.echoed_json,
    g.generation_key, g.response_text, g.finish_reason, g.request_json, g.model_version, g.cache_hit, g.error,
    g.extracted_text,
    g.ingestion, r.document_sha256, r.renderer_version, r.media_type, r.filename, r.extraction, r.document_text,
    s.task_prompt, s.source
FROM format_robustness.extracted_decisions AS d
JOIN format_robustness.workflow_generations AS g
  USING (model_id, workflow_id, dataset, instance_id, format, repeat)
JOIN format_robustness.rendered_documents AS r USING (dataset, instance_id, format)
JOIN format_robustness.source_instances AS s USING (dataset, instance_id)
WHERE d.model_id IN (SELECT model_id FROM format_robustness.lineage_models WHERE current);

-- Groups behind an MR violation rate: one row per violating group (instance, repeat) × format.
CREATE OR REPLACE VIEW format_robustness.mr_violation_lineage AS
SELECT f.mr1, f.mr2, f.mr3, l.*
FROM format_robustness.mr_flags AS f
JOIN format_robustness.decision_lineage AS l USING (workflow_id, dataset, instance_id, repeat)
WHERE f.mr1 OR f.mr2 OR f.mr3;

-- Instances behind a stability rate Stb_f: every generation with whether the k repeats of its
-- (workflow, dataset, instance, format) agree (⊥, an unparseable output, is its own outcome). A failed
-- call (parse_reason call_error) is not an answer: an instance with one has stable NULL (not measured).
CREATE OR REPLACE VIEW format_robustness.stability_lineage AS
SELECT s.stable, l.*
FROM format_robustness.decision_lineage AS l
JOIN (
    SELECT workflow_id, dataset, instance_id, format,
           CASE WHEN bool_or(parse_reason IS NOT DISTINCT FROM 'call_error') THEN NULL
                ELSE count(DISTINCT coalesce(decision, '⊥ unparseable')) = 1 END AS stable
    FROM format_robustness.decision_lineage
    GROUP BY workflow_id, dataset, instance_id, format
) AS s USING (workflow_id, dataset, instance_id, format);

-- Groups behind an evidence-drift flip rate: each generation in a format other than TXT next to
-- the TXT generation of its (instance, repeat) group, flipped when the two decisions differ (⊥ its own value);
-- flipped is NULL (no comparison) when either call failed at the provider (parse_reason call_error).
CREATE OR REPLACE VIEW format_robustness.flip_lineage AS
SELECT CASE WHEN l.parse_reason IS NOT DISTINCT FROM 'call_error' OR b.parse_reason IS NOT DISTINCT FROM 'call_error'
            THEN NULL
            ELSE coalesce(l.decision, '⊥ unparseable') <> coalesce(b.decision, '⊥ unparseable') END AS flipped,
       b.decision AS baseline_decision, b.response_text AS baseline_response_text, l.*
FROM format_robustness.decision_lineage AS l
JOIN format_robustness.decision_lineage AS b
  ON b.model_id = l.model_id AND b.workflow_id = l.workflow_id AND b.dataset = l.dataset
 AND b.instance_id = l.instance_id AND b.repeat = l.repeat AND b.format = 'txt'
WHERE l.format <> 'txt';
