"""The studies: one package per study, named like its Dagster asset group and key prefix.

Every study package repeats the same module names so that knowing one study is knowing where
to look in the next:

* ``plan`` — requests to send (rendered inputs × models × repeats) and the rows of the
  generation and extraction tables;
* ``extract`` — reading an answer out of a raw completion, with a reason when it cannot;
* ``metrics`` — the paper's metric tables from the extracted rows;
* ``schemas`` — the pandera schema of every intermediate and metric table;
* ``study`` — ``STUDY``, the package as one :class:`metamorph.study.Study` (its assets, options,
  loader, plan, headline and report card), which is how the jobs, sensors, report card and the
  ``metamorph run`` / ``metamorph plan`` commands find it (:func:`metamorph.study.studies`);
* ``vocab`` — the study's vocabulary (formats, modes, types, languages ...) declared once, which
  every other module, schema check and report refers to;

plus the study's own concepts (renderers, wrappers, perturbation operators ...).
"""

__all__: list[str] = []
