"""YAML for untrusted files: bounded, strict, and every error one line naming file, line and column.

``yaml.safe_load`` never runs code, but it still accepts inputs that hang or crash a program that
uses the result: aliases that expand exponentially ("billion laughs", expanded later by ``str()``
or a list copy), nesting deep enough for a RecursionError, duplicate keys (the last one silently
wins), and files that are not text. ``load_text``/``load_file`` refuse all of these up front:

* at most MAX_BYTES bytes, UTF-8 text only;
* nesting at most MAX_DEPTH collections deep (checked on the event stream, which is not recursive);
* at most MAX_NODES nodes once every alias is expanded (recursive aliases are refused);
* no key twice in one mapping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from grpo_bench.errors import UserError

MAX_BYTES = 1_000_000
MAX_DEPTH = 64
MAX_NODES = 100_000


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a plain value",
                                                        key_node.start_mark) from None
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key].line + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _where(source: str, mark: Any) -> str:
    if mark is None:
        return f"{source}: "
    return f"{source}:{mark.line + 1}:{mark.column + 1}: "


def _check_depth(text: str, source: str) -> None:
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise UserError(f"{_where(source, event.start_mark)}nested more than {MAX_DEPTH} levels deep")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(exc, source) from None
    except yaml.YAMLError as exc:
        raise UserError(f"{source}: invalid YAML ({str(exc).splitlines()[0]})") from None


def _check_size(node: yaml.Node, source: str) -> None:
    """Nodes after alias expansion, memoised per node (polynomial even for exponential expansions)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(n: yaml.Node) -> int:
        key = id(n)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise UserError(f"{_where(source, n.start_mark)}an alias refers to the collection that contains it")
        active.add(key)
        total = 1
        if isinstance(n, yaml.SequenceNode):
            total += sum(size(c) for c in n.value)
        elif isinstance(n, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in n.value)
        active.discard(key)
        sizes[key] = total
        if total > MAX_NODES:
            raise UserError(f"{_where(source, n.start_mark)}expands to more than {MAX_NODES} values "
                            "(aliases repeat a collection too often)")
        return total

    size(node)


def _yaml_error(exc: yaml.MarkedYAMLError, source: str) -> UserError:
    mark = exc.problem_mark or exc.context_mark
    problem = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
    return UserError(f"{_where(source, mark)}invalid YAML: {problem}")


def load_text(text: str, source: str = "<yaml>") -> Any:
    """Parse ``text`` (from ``source``, named in errors) under the limits of this module."""
    if len(text) > MAX_BYTES:
        raise UserError(f"{source}: {len(text)} characters; at most {MAX_BYTES} are read")
    _check_depth(text, source)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node, source)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(exc, source) from None
    except yaml.YAMLError as exc:
        raise UserError(f"{source}: invalid YAML ({' '.join(str(exc).split())})") from None
    finally:
        loader.dispose()


def read_text(path: str | Path, what: str = "file") -> str:
    """A text file's contents, or a one-line UserError (missing, too big, binary, not UTF-8)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} {str(path)!r} does not exist" if not path.exists() else
                        f"{what} {str(path)!r} is not a file")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise UserError(f"{path}: {size} bytes; a {what} may hold at most {MAX_BYTES}")
    data = path.read_bytes()
    if b"\x00" in data:
        raise UserError(f"{path}: a binary file, not a text {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the {what} as UTF-8") from None


def load_file(path: str | Path, what: str = "YAML file") -> Any:
    return load_text(read_text(path, what), str(path))
