-- Acc_f: accuracy per workflow × dataset × format, in % (paper §5.1, Table 2).
-- Input  gen: one row per generation (workflow_id, dataset, instance_id, format, repeat,
--             decision [NULL = unparseable], gold [NULL = no ground truth], is_correct,
--             call_error [the call failed at the provider: not a reply]).
-- Over ALL repeats of replies that have gold; an unparseable reply is incorrect; a failed call is
-- in neither n nor the baseline, only in n_call_errors (a format whose every call failed gives
-- NULL rates and n = 0). majority_baseline_pct: the accuracy of always answering the most frequent
-- gold label of the same rows (the majority-label baseline). Datasets without gold give no rows.
WITH cells AS (
    SELECT workflow_id, dataset, format, sum(CASE WHEN call_error THEN 1 ELSE 0 END) AS n_call_errors
    FROM gen WHERE gold IS NOT NULL
    GROUP BY workflow_id, dataset, format
),
labelled AS (
    SELECT * FROM gen WHERE gold IS NOT NULL AND NOT call_error
),
majority AS (
    SELECT workflow_id, dataset, format, max(n_label) AS n_majority
    FROM (SELECT workflow_id, dataset, format, gold, count(*) AS n_label
          FROM labelled GROUP BY workflow_id, dataset, format, gold)
    GROUP BY workflow_id, dataset, format
)
SELECT
    c.workflow_id,
    c.dataset,
    c.format,
    100.0 * sum(CASE WHEN l.decision IS NOT NULL AND l.is_correct THEN 1 ELSE 0 END) / nullif(count(l.format), 0)
                                                                                       AS accuracy_pct,
    100.0 * any_value(m.n_majority) / nullif(count(l.format), 0)                       AS majority_baseline_pct,
    count(l.format)                                                                    AS n,
    coalesce(sum(CASE WHEN l.decision IS NOT NULL AND l.is_correct THEN 1 ELSE 0 END), 0) AS n_correct,
    coalesce(sum(CASE WHEN l.format IS NOT NULL AND l.decision IS NULL THEN 1 ELSE 0 END), 0) AS n_unparseable,
    any_value(c.n_call_errors)                                                         AS n_call_errors
FROM cells AS c
LEFT JOIN labelled AS l USING (workflow_id, dataset, format)
LEFT JOIN majority AS m USING (workflow_id, dataset, format)
GROUP BY c.workflow_id, c.dataset, c.format
ORDER BY c.workflow_id, c.dataset,
         CASE c.format WHEN 'txt' THEN 0 WHEN 'md' THEN 1 WHEN 'json' THEN 2 WHEN 'csv' THEN 3 ELSE 4 END, c.format;
