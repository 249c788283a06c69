"""metamorph: metamorphic robustness studies of LLMs and LLM workflows.

The pure library: nothing in this package imports Dagster. Studies are built from
renderers / wrappers / perturbations (surface forms), provider clients with a
generation cache, extractors, metrics and statistics, and pandera schemas for every
intermediate table. The Dagster assets in ``assets/`` are thin wrappers around it.
"""

__all__: list[str] = []

__version__ = "0.1.0"
