-- Silent violations (paper §5.1): the evidence changed (MR2 violated) while the decision held (MR1 not).
-- Input  flags: one row per workflow × dataset × group (instance, repeat) with boolean mr1, mr2 (NULL when undefined,
--               e.g. an instance rendered in fewer than two formats; such rows are not counted).
-- silent_pct = 100 · #(MR2 ∧ ¬MR1) / #MR2, NULL when there is no MR2 violation.
SELECT
    workflow_id,
    dataset,
    CASE WHEN sum(CASE WHEN mr2 THEN 1 ELSE 0 END) = 0 THEN NULL
         ELSE 100.0 * sum(CASE WHEN mr2 AND NOT mr1 THEN 1 ELSE 0 END) / sum(CASE WHEN mr2 THEN 1 ELSE 0 END)
    END                                                   AS silent_pct,
    sum(CASE WHEN mr2 AND NOT mr1 THEN 1 ELSE 0 END)      AS n_silent,
    sum(CASE WHEN mr2 THEN 1 ELSE 0 END)                  AS n_mr2,
    count(*)                                              AS n_groups,
    count(DISTINCT instance_id)                           AS n_instances
FROM flags
WHERE mr1 IS NOT NULL AND mr2 IS NOT NULL
GROUP BY workflow_id, dataset
ORDER BY workflow_id, dataset;
