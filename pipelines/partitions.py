"""``metamorph partitions``: list the model partitions of the Dagster instance, remove stray ones.

Every registry model id is a partition of the dynamic partitions definition ``model``
(``assets.partitions``; ``metamorph run`` and the registry sensor add them). The UI's "Add a
partition" adds any text, e.g. a typo: its launch is refused (``pipelines.inputs``), and this
command removes it from the instance (``DAGSTER_HOME``, default ``data/dagster_home``). A registry
model's partition is not removed (it would be added back by the next run): remove the model from
the registry first. Removing a partition deletes no warehouse rows and no run history.

    metamorph partitions                      # one line per partition: id and "registry" / "not in the registry"
                                              # (none yet, or no instance yet: one line saying so)
    metamorph partitions --remove nosuchmodel

Listing creates nothing: a ``DAGSTER_HOME`` that does not exist or holds no instance is one line
saying so (exit 0), as an instance without partitions is.

Exit codes: 0 done; 2 a key that is not a partition (no instance: none is), or a registry model's
key, or a ``DAGSTER_HOME`` that is not a directory (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``metamorph partitions``."""
    p.add_argument(
        "--remove",
        nargs="+",
        metavar="ID",
        default=[],
        help="Partitions to remove (not registry model ids); nothing is removed if one of them cannot be.",
    )


def stray_partitions(instance, registry_ids: set[str]) -> list[str]:
    """The model partitions of ``instance`` that are not in ``registry_ids``, in the instance's order."""
    from assets.partitions import model_partitions

    return [k for k in instance.get_dynamic_partitions(model_partitions.name) if k not in registry_ids]


def remove_partitions(instance, keys: list[str], registry_ids: set[str]) -> None:
    """Delete the model partitions ``keys`` from ``instance``; raises :class:`metamorph.errors.ConfigError`
    (nothing deleted) when a key is not a partition or is a registry model id."""
    from assets.partitions import model_partitions
    from metamorph.errors import ConfigError

    present = set(instance.get_dynamic_partitions(model_partitions.name))
    for k in keys:
        if k not in present:
            raise ConfigError(f"--remove {k!r}: not a model partition of the instance")
        if k in registry_ids:
            raise ConfigError(f"--remove {k!r}: a model of the registry; remove it from the registry first")
    for k in keys:
        instance.delete_dynamic_partition(model_partitions.name, k)


def run(args: argparse.Namespace) -> int:
    """List the partitions, or remove ``args.remove``; returns the exit code."""
    from assets.partitions import model_partitions
    from metamorph.errors import MetamorphError
    from metamorph.models import load_registry
    from metamorph.errors import ConfigError
    from pipelines.instance import dagster_home, ensure_dagster_home, has_instance, open_instance
    from resources.paths import registry_path

    try:
        ids = {m.id for m in load_registry(registry_path())}
        home = dagster_home()
        if home.exists() and not home.is_dir():
            raise ConfigError(f"DAGSTER_HOME {home}: {home} is not a directory; set DAGSTER_HOME to a directory")
        if not home.exists() or not has_instance(home):
            if args.remove:
                raise ConfigError(f"--remove {args.remove[0]!r}: not a model partition (no Dagster instance at {home})")
            print(
                f"no Dagster instance at {home} (metamorph run creates it and adds one partition per model it evaluates)"
            )
            return 0
        home = ensure_dagster_home()
        instance = open_instance()
        if args.remove:
            remove_partitions(instance, list(args.remove), ids)
            print(f"removed {len(args.remove)} partition(s): {', '.join(args.remove)}")
            return 0
    except MetamorphError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    keys = instance.get_dynamic_partitions(model_partitions.name)
    if not keys:
        print(f"no model partitions in the instance {home} (metamorph run adds one per model it evaluates)")
    for k in keys:
        print(
            f"{k}\t{'registry' if k in ids else 'not in the registry (remove: metamorph partitions --remove ' + k + ')'}"
        )
    return 0
