-- Stb_f: % of instances whose k repeats of format f all give the same decision (paper §5.1, Table 2).
-- Input  gen: one row per generation. An unparseable output (decision NULL) is its own outcome ⊥:
--             k ⊥s agree, ⊥ next to a label disagrees. k = 1 is trivially stable (k_min/k_max show k).
WITH cell AS (
    SELECT workflow_id, dataset, instance_id, format,
           count(DISTINCT coalesce(decision, '⊥ unparseable')) = 1 AS stable,
           count(*)                                               AS k
    FROM gen
    GROUP BY workflow_id, dataset, instance_id, format
)
SELECT
    workflow_id,
    dataset,
    format,
    100.0 * avg(CASE WHEN stable THEN 1 ELSE 0 END) AS stability_pct,
    count(*)                                        AS n_instances,
    min(k)                                          AS k_min,
    max(k)                                          AS k_max
FROM cell
GROUP BY workflow_id, dataset, format
ORDER BY workflow_id, dataset,
         CASE format WHEN 'txt' THEN 0 WHEN 'md' THEN 1 WHEN 'json' THEN 2 WHEN 'csv' THEN 3 ELSE 4 END, format;
