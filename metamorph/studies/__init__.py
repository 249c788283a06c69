"""The studies: one package per study, named like its Dagster asset group and key prefix.

Every study package repeats the same module names so that knowing one study is knowing where
to look in the next:

* ``plan`` — requests to send (rendered inputs × models × repeats) and the rows of the
  generation and extraction tables;
* ``extract`` — reading an answer out of a raw completion, with a reason when it cannot;
* ``metrics`` — the paper's metric tables from the extracted rows;
* ``schemas`` — the pandera schema of every intermediate and metric table;
* ``study`` — ``STUDY``, the package as one :class:`metamorph.study.Study` (its assets, options,
  loader, plan, headline, report card, verdict sources, traces, commands, vocabulary and SQL
  folder), which is how the jobs, sensors, report card and every command find it
  (:func:`metamorph.study.studies`): nothing imports another module of the package by its name;
* ``report`` — the headline tables, the report-card rows and the verdicts' item scores;
  ``lineage`` (optional) — the traces of ``metamorph trace``; ``cli`` (optional) — the study's own
  commands;
* ``vocab`` — the study's vocabulary (formats, modes, types, languages ...) declared once, which
  every other module, schema check and report refers to;

plus the study's own concepts (renderers, wrappers, perturbation operators ...).
"""

__all__: list[str] = []
