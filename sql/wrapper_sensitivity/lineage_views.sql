-- Lineage views: from an accuracy / FSI / PSI cell back to the exact prompt and raw completion.
-- Run against the warehouse after the study's tables exist (asset wrapper_sensitivity/lineage_views).

-- Every scored answer (one row per generation × extraction mode) of a registry model with its raw
-- completion, the exact request, the wrapped prompt and the item. A model removed from the registry
-- or whose partition was removed is left out, as from the metric tables (lineage_models names it). The json_constrained arm has no row of its own in
-- wrapped_prompts (it sends the json wrapper's messages), hence the LEFT JOIN: no answer is dropped.
CREATE OR REPLACE VIEW wrapper_sensitivity.answer_lineage AS
SELECT
    s.model_id, s.task, s.wrapper, s.item_id, s.seed, s.mode, s.answer_type,
    s.value, s.parseable, s.correct, s.reason, i.gold,
    g.generation_key, g.response_text, g.finish_reason, g.request_json, g.model_version, g.cache_hit, g.error,
    p.template_version, p.messages_json, p.pad_chars,
    i.question, i.passage, i.choices_json, i.source
FROM wrapper_sensitivity.scored_answers AS s
JOIN wrapper_sensitivity.wrapper_generations AS g USING (model_id, task, item_id, wrapper, seed)
LEFT JOIN wrapper_sensitivity.wrapped_prompts AS p USING (task, item_id, wrapper)
JOIN wrapper_sensitivity.qa_items AS i USING (task, item_id)
WHERE s.model_id IN (SELECT model_id FROM wrapper_sensitivity.lineage_models WHERE current);

-- A wrapper_cells cell (model × task × wrapper × mode) joined to the answers behind it.
CREATE OR REPLACE VIEW wrapper_sensitivity.cell_lineage AS
SELECT c.accuracy_pct, c.parseability_pct, c.n AS cell_n, l.*
FROM wrapper_sensitivity.wrapper_cells AS c
JOIN wrapper_sensitivity.answer_lineage AS l USING (model_id, task, wrapper, mode);

-- FSI (accuracy spread) and PSI (parseability spread) of a model × task × mode over the five
-- standard wrappers: the answers of the best and the worst wrapper(s) (every tied wrapper; role
-- best / worst, both when all wrappers tie), as metrics.fsi_psi takes max − min of wrapper_cells.
CREATE OR REPLACE VIEW wrapper_sensitivity.spread_lineage AS
WITH cells AS (
    SELECT model_id, task, wrapper, mode, 'FSI' AS metric, accuracy_pct AS value_pct
    FROM wrapper_sensitivity.wrapper_cells WHERE wrapper <> 'json_constrained'
    UNION ALL
    SELECT model_id, task, wrapper, mode, 'PSI' AS metric, parseability_pct AS value_pct
    FROM wrapper_sensitivity.wrapper_cells WHERE wrapper <> 'json_constrained'
), ranged AS (
    SELECT *, max(value_pct) OVER w AS max_pct, min(value_pct) OVER w AS min_pct
    FROM cells WINDOW w AS (PARTITION BY model_id, task, mode, metric)
), roles AS (
    SELECT model_id, task, wrapper, mode, metric, value_pct, max_pct - min_pct AS spread_pp, 'best' AS role
    FROM ranged WHERE abs(value_pct - max_pct) <= 1e-9
    UNION ALL
    SELECT model_id, task, wrapper, mode, metric, value_pct, max_pct - min_pct AS spread_pp, 'worst' AS role
    FROM ranged WHERE abs(value_pct - min_pct) <= 1e-9
)
SELECT r.metric, r.role, r.value_pct AS wrapper_value_pct, r.spread_pp, l.*
FROM roles AS r
JOIN wrapper_sensitivity.answer_lineage AS l USING (model_id, task, wrapper, mode);
