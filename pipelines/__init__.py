"""Dagster wiring: Definitions, jobs, schedules, sensors, partitions."""
