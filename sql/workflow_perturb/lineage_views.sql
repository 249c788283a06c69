-- Lineage views: from a per-variant metric (Chain/Graph F1, BLEU, GLEU, BERTScore, Kendall τ, judge)
-- back to the golden, the variant's text and, for LLM-written variants, the generator's raw reply.
-- Run against the warehouse after the study's tables exist (asset workflow_perturb/lineage_views).

-- Every variant (deterministic and LLM-written) with its scores, its text and its golden. A variant
-- the generator failed to produce (no workflow parsed) has no scores: LEFT JOIN, it is not dropped.
-- The LLM-written variants are those of registry models: a generator model removed from the registry
-- or whose partition was removed is left out, as from the metric tables (lineage_models names it).
CREATE OR REPLACE VIEW workflow_perturb.variant_lineage AS
WITH current_models AS (
    SELECT model_id FROM workflow_perturb.lineage_models WHERE current
), variants AS (
    SELECT * FROM workflow_perturb.perturbations
    UNION ALL BY NAME
    SELECT * FROM workflow_perturb.perturbations_llm WHERE model_id IN (SELECT model_id FROM current_models)
), scores AS (
    SELECT * FROM workflow_perturb.perturbation_scores
    UNION ALL BY NAME
    SELECT * FROM workflow_perturb.perturbation_scores_llm WHERE model_id IN (SELECT model_id FROM current_models)
)
SELECT
    v.model_id, v.variant_id, v.golden_id, v.type, v.p AS severity, v.operator, v.status, v.target_score,
    g.stratum, v.method, v.model AS generator_model, v.attempts, v.failure, v.altered_node_ids, v.n_altered,
    s.chain_f1, s.graph_f1, s.bleu, s.gleu, s.bertscore_f1, s.kendall_tau, s.kendall_tau_reason, s.n_aligned,
    s.encoder,
    v.workflow_text AS variant_text, v.raw_output AS response_text,
    g.task, g.n_nodes AS golden_n_nodes, g.workflow_text AS golden_text
FROM variants AS v
LEFT JOIN scores AS s USING (model_id, variant_id)
JOIN workflow_perturb.goldens AS g ON g.golden_id = v.golden_id;

-- Every judge call (three per judged variant) of a registry model as judge: the judge model, its call index, generation key and
-- the reply's parse reason, with the variant's and the golden's text. The exact request and raw
-- reply are the generation cache's row of generation_key (table generations of
-- generation_cache.duckdb; `metamorph trace` joins it read-only).
CREATE OR REPLACE VIEW workflow_perturb.judge_lineage AS
SELECT
    j.model_id AS judge_model_id, j.variant_id, j.golden_id, j.type, j.severity, j.judge, j.judge_valid,
    j.judge_invalid, c.i + 1 AS call_index,
    json_extract_string(j.generation_keys, '$[' || c.i || ']') AS generation_key,
    json_extract_string(j.judge_reasons, '$[' || c.i || ']') AS parse_reason,
    v.operator, v.stratum, v.variant_text, v.golden_text
FROM workflow_perturb.judge_scores AS j
CROSS JOIN LATERAL (SELECT unnest(range(json_array_length(j.generation_keys)::BIGINT)) AS i) AS c
LEFT JOIN workflow_perturb.variant_lineage AS v ON v.variant_id = j.variant_id AND v.model_id = 'deterministic'
WHERE j.model_id IN (SELECT model_id FROM workflow_perturb.lineage_models WHERE current);
