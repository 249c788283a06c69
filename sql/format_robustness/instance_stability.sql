-- The instance unit of Stb_f (paper §5.1, Table 2): one row per workflow × dataset × instance × format,
-- stable when its k repeats all give the same decision.
-- Input  gen: one row per generation. An unparseable output (decision NULL) is its own outcome ⊥:
--             k ⊥s agree, ⊥ next to a label disagrees. k = 1 is trivially stable.
SELECT workflow_id, dataset, instance_id, format,
       count(DISTINCT coalesce(decision, '⊥ unparseable')) = 1 AS stable,
       count(*)                                               AS k
FROM gen
GROUP BY workflow_id, dataset, instance_id, format
