-- Acc_f: accuracy per workflow × dataset × format, in % (paper §5.1, Table 2).
-- Input  gen: one row per generation (workflow_id, dataset, instance_id, format, repeat,
--             decision [NULL = unparseable], gold [NULL = no ground truth], is_correct).
-- Over ALL repeats of generations that have gold; an unparseable output is incorrect.
-- majority_baseline_pct: the accuracy of always answering the most frequent gold label of the
-- same rows (the majority-label baseline). Datasets without gold give no rows.
WITH labelled AS (
    SELECT * FROM gen WHERE gold IS NOT NULL
),
majority AS (
    SELECT workflow_id, dataset, format, max(n_label) AS n_majority
    FROM (SELECT workflow_id, dataset, format, gold, count(*) AS n_label
          FROM labelled GROUP BY workflow_id, dataset, format, gold)
    GROUP BY workflow_id, dataset, format
)
SELECT
    l.workflow_id,
    l.dataset,
    l.format,
    100.0 * sum(CASE WHEN l.decision IS NOT NULL AND l.is_correct THEN 1 ELSE 0 END) / count(*) AS accuracy_pct,
    100.0 * any_value(m.n_majority) / count(*)                                         AS majority_baseline_pct,
    count(*)                                                                           AS n,
    sum(CASE WHEN l.decision IS NOT NULL AND l.is_correct THEN 1 ELSE 0 END)           AS n_correct,
    sum(CASE WHEN l.decision IS NULL THEN 1 ELSE 0 END)                                AS n_unparseable
FROM labelled AS l
JOIN majority AS m USING (workflow_id, dataset, format)
GROUP BY l.workflow_id, l.dataset, l.format
ORDER BY l.workflow_id, l.dataset,
         CASE l.format WHEN 'txt' THEN 0 WHEN 'md' THEN 1 WHEN 'json' THEN 2 WHEN 'csv' THEN 3 ELSE 4 END, l.format;
