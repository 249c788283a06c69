-- Lineage views: from a recovery-rate cell back to its prompts, raw replies and parse reasons.
-- Run against the warehouse after the study's tables exist (asset order_probe/lineage_views).

-- Every scored reply of a registry model with its raw completion, the exact request, the rendered
-- prompt and the item. A model removed from the registry or whose partition was removed is left out,
-- as from the metric tables (lineage_models names it).
CREATE OR REPLACE VIEW order_probe.reply_lineage AS
SELECT
    s.model_id, s.language, s.setting, s.item_id, s.pattern, s.input_kind, s.scrambled, s.canonical,
    s.structure, s.kept_adjacent, s.expression, s.explanation, s.parse_ok, s.reason, s.correct,
    g.generation_key, g.response_text, g.finish_reason, g.request_json, g.model_version, g.cache_hit, g.error,
    p.template_version, p.messages_json, p.stop_json, p.max_tokens,
    i.meanings_json, i.source
FROM order_probe.scored_replies AS s
JOIN order_probe.order_generations AS g USING (model_id, setting, item_id, pattern)
JOIN order_probe.order_prompts AS p USING (item_id, pattern, setting)
JOIN order_probe.order_items AS i USING (item_id)
WHERE s.model_id IN (SELECT model_id FROM order_probe.lineage_models WHERE current);

-- A recovery_rates cell (model × cell_language × setting; 'all' pools the languages) joined to
-- the scrambled replies behind it: filter on cell_language to see one cell's replies.
CREATE OR REPLACE VIEW order_probe.recovery_cell_lineage AS
SELECT r.language AS cell_language, r.recovery_pct, r.ci_low_pct, r.ci_high_pct, r.parse_failure_pct, l.*
FROM order_probe.recovery_rates AS r
JOIN order_probe.reply_lineage AS l
  ON l.model_id = r.model_id AND l.setting = r.setting AND (r.language = 'all' OR l.language = r.language)
WHERE l.input_kind = 'scrambled';
