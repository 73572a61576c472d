"""YAML in and out: reading with limits (size, nesting, expanded values, duplicate keys), writing
atomically.

A hostile file must cost a one-line error, never memory or time: yaml.safe_load builds aliases as
shared references (an alias bomb is small in memory but huge once walked), so the loaded value is
measured with an explicit, bounded walk before anything else touches it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autotune.errors import ConfigError, excerpt

# a model YAML, a space or best.yaml is a few kB; 1 MiB is far beyond any real one
MAX_BYTES = 1 << 20
MAX_VALUES = 100_000  # values in the loaded document, aliases counted each time they are used
MAX_DEPTH = 32  # nesting of mappings and lists


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last silently)."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            if key in seen:
                mark = key_node.start_mark
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {str(key)[:80]!r} (first at line "
                    f"{seen[key].start_mark.line + 1})",
                    mark,
                )
            seen[key] = key_node
        except TypeError:  # an unhashable key: let PyYAML say so
            break
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _check_size(value: object, where: str) -> None:
    """Refuse a document that expands to too many values or nests too deeply (walk stops at the
    limit)."""
    stack, count = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(
                f"{where}: holds more than {MAX_VALUES:,} values (aliases counted as used); "
                "a model YAML needs a few hundred"
            )
        if depth > MAX_DEPTH:
            raise ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for pair in item.items() for v in pair)
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def read(path: Path, what: str) -> Any:
    """The YAML document at path, within the limits above; ConfigError (one line) on any problem."""
    if not path.is_file():
        raise ConfigError(f"{what}: no such file: {path}")
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(
                f"{path}: {size:,} bytes; a YAML file here may hold at most {MAX_BYTES:,}"
            )
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read: {err}") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{path}{where}: invalid YAML: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested more than {MAX_DEPTH} levels deep") from None
    # e.g. an integer of more digits than Python converts (sys.get_int_max_str_digits)
    except ValueError as err:
        raise ConfigError(f"{path}: a value cannot be read: {excerpt(str(err), 120)}") from None
    _check_size(data, str(path))
    return data


class _PlainDumper(yaml.SafeDumper):
    """Safe YAML without anchors/aliases: best.yaml is read by people."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def write(path: Path, doc: dict[str, Any]) -> None:
    """Write YAML for people (no anchors) atomically: a reader never sees a half-written file."""
    from autotune import atomic

    atomic.write_text(path, yaml.dump(doc, Dumper=_PlainDumper, sort_keys=False))
