"""The one YAML reader of the package: every config file (presets, the tiny world's config, the SGLang
plugin's settings) is read by `read_mapping`, which refuses a key given twice in one mapping and any alias
before either is expanded, and names the file and line. A leaf like `errors`: it imports nothing else of
the package, so every room can read its files the same way (docs/architecture.md, "Configs")."""
from __future__ import annotations

from pathlib import Path

import yaml

from acceptmoe.errors import UserError, shown


class YAMLFileError(UserError, ValueError):
    """A config file that is missing, not UTF-8, not YAML, not a mapping, or has a duplicate key or an alias."""


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader that refuses a key given twice in one mapping (YAML keeps the last silently) and
    any alias (`*name`), before anything is expanded: a config has no use for them, and nested aliases
    expand exponentially (an "alias bomb")."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.MarkedYAMLError(problem="an alias (*name) is not allowed in a config; write the value out",
                                       problem_mark=mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                again = key in seen
            except TypeError:  # an unhashable key: the constructor names it
                break
            if again:
                raise yaml.MarkedYAMLError(problem=f"the key {shown(key)} is given twice in this mapping (YAML "
                                                   f"would keep the last silently); keep one",
                                           problem_mark=key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_mapping(text: str, where: str, error: type[UserError] = YAMLFileError) -> dict:
    """`text` as a YAML mapping (empty: {}); any problem is `error` naming `where` and the line."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{where}:{mark.line + 1}:{mark.column + 1}" if mark else where
        raise error(f"{at}: YAML syntax error: {getattr(exc, 'problem', None) or exc}; fix the file") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{where}: the top level must be a mapping of config keys")
    return data


def read_mapping(path: Path, error: type[UserError] = YAMLFileError) -> dict:
    """The YAML mapping in the file at `path` (`load_mapping`); a missing or non-UTF-8 file is `error` too."""
    if not path.is_file():
        raise error(f"config file {path} not found")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start} is {exc.object[exc.start:exc.start + 1]!r}); "
                    f"save the file as UTF-8") from None
    return load_mapping(text, str(path), error)
