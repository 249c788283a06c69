-- Stb_f: % of instances whose k repeats of format f all give the same decision (paper §5.1, Table 2).
-- Input  cell: one row per workflow × dataset × instance × format with `stable` and its `k`
--              (instance_stability.sql; ⊥ is a value there). k_min/k_max show k.
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
