-- Acc_f: accuracy per workflow × dataset × format, in % (paper §5.1, Table 2).
-- Input  gen: one row per generation (workflow_id, dataset, instance_id, format, repeat,
--             decision [NULL = unparseable], gold [NULL = no ground truth], is_correct).
-- Over ALL repeats of generations that have gold; an unparseable output is incorrect.
-- Datasets without gold give no rows.
SELECT
    workflow_id,
    dataset,
    format,
    100.0 * sum(CASE WHEN decision IS NOT NULL AND is_correct THEN 1 ELSE 0 END) / count(*) AS accuracy_pct,
    count(*)                                                                       AS n,
    sum(CASE WHEN decision IS NOT NULL AND is_correct THEN 1 ELSE 0 END)           AS n_correct,
    sum(CASE WHEN decision IS NULL THEN 1 ELSE 0 END)                              AS n_unparseable
FROM gen
WHERE gold IS NOT NULL
GROUP BY workflow_id, dataset, format
ORDER BY workflow_id, dataset,
         CASE format WHEN 'txt' THEN 0 WHEN 'md' THEN 1 WHEN 'json' THEN 2 WHEN 'csv' THEN 3 ELSE 4 END, format;
