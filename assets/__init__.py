"""Thin software-defined assets, one module per study (asset key prefix and group = study)."""
