"""Spec files: read them, parse them, and find the line of every key and item.

YAML is read by ruamel.yaml as YAML 1.2 (``yes`` is text, ``1e3`` a
number), with its round-trip loader: it records the line of every key and
list item (``.lc``) and refuses duplicate keys. A spec is plain data, so omni
refuses on top of that, each at its field and line:

- explicit tags (``!!python/object``, ``!foo``, even ``!!str``);
- anchors and aliases: an error inside an alias would point at the anchor,
  not at the arm that used it, and a few nested aliases expand to billions of
  values ("billion laughs"); ``matrix:`` is the way to share settings;
- merge keys (``<<:``), which exist to share settings too;
- keys that are lists or mappings.

Dates stay text (``name: 2024-01-01`` is a name).

JSON is read by the json module, the authority on JSON. Its lines come from
ruamel.yaml reading the same text, as every JSON text is also YAML 1.2 (tabs,
JSON whitespace that YAML refuses as indentation, read as spaces). Should
ruamel.yaml still fail on a valid JSON file, its problems name the field
without a line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.composer import Composer, MaxDepthExceededError
from ruamel.yaml.constructor import DuplicateKeyError, RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.scalarbool import ScalarBoolean

from omni.errors import SpecError
from omni.spec.problems import Lines, Loc, problem_line

SUFFIXES = (".yaml", ".yml", ".json")
_MERGE_TAG = "tag:yaml.org,2002:merge"
MAX_DEPTH = 100  # a spec is a few levels deep; deeper is a mistake, not a wish


def read_spec(path: Path) -> tuple[bytes, str, Any, Lines]:
    """The file's bytes, its text, its data and the line of every key and item."""
    source = str(path)
    raw = _read_bytes(path)
    text = _decode(raw, source)
    parse = _parse_json if path.suffix.lower() == ".json" else _parse_yaml
    data, lines = parse(text, source)
    return raw, text, data, lines


def _read_bytes(path: Path) -> bytes:
    try:
        is_dir = path.is_dir()
    except OSError as err:  # a name longer than the file system takes (ENAMETOOLONG), a loop of links
        raise SpecError(f"{str(path)[:200]}: cannot read: {err.strerror}") from None
    if is_dir:
        raise SpecError(f"{path}: is a directory; give a spec file inside it")
    if path.suffix.lower() not in SUFFIXES:
        kind = path.suffix or "(no extension)"
        raise SpecError(f"{path}: unsupported spec type {kind!r}; use .yaml, .yml or .json")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        raise SpecError(f"{path}: no such file{where}") from None
    except OSError as err:
        raise SpecError(f"{path}: cannot read: {err.strerror}") from None


def _decode(raw: bytes, source: str) -> str:
    try:
        text = raw.decode("utf-8-sig")  # -sig: editors on Windows write a BOM
    except UnicodeDecodeError as err:
        raise SpecError(f"{source}: not UTF-8 text (bad byte at offset {err.start})") from None
    if not text.strip():
        raise SpecError(f"{source}: the file is empty; a spec needs at least name: and arms:")
    return text


def _require_mapping(data: Any, source: str) -> None:
    if data is None:
        raise SpecError(f"{source}:1 the file holds no data (only comments?); a spec needs name: and arms:")
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}:1 the top level must be a mapping of sweep keys (name:, arms:, ...), got a {type(data).__name__}"
        )


# --- YAML ---


class _Refused(Exception):
    """A construct a spec does not allow, at a node of the document."""

    def __init__(self, line: int, text: str, loc: Loc = ()):
        super().__init__(text)
        self.line, self.text, self.loc = line, text, loc

    def message(self, source: str) -> str:
        return problem_line(source, self.line, self.loc, self.text)


class _Composer(Composer):
    """ruamel.yaml's composer, noting each node written with a tag or an anchor.

    The tag is seen here, on the parser's event: on the node, a tag written
    out in full (``!<tag:yaml.org,2002:str>``) looks like a resolved one.
    """

    def __init__(self, loader: Any = None):
        super().__init__(loader)
        self.refused: dict[int, str] = {}  # id(node) -> why

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.parser.peek_event()
        node = super().compose_node(parent, index)
        if isinstance(event, AliasEvent):
            return node  # its anchor is refused where it was set
        if event.ctag is not None:
            tag = _short_tag(str(event.ctag))
            self.refused[id(node)] = f"YAML tag {tag!r} is not allowed; a spec holds plain values"
        elif event.anchor is not None:
            self.refused[id(node)] = (
                f"anchor &{event.anchor} is not supported (nor are aliases); use matrix: to share settings"
            )
        return node


class _Constructor(RoundTripConstructor):
    """ruamel.yaml's round-trip constructor, reading dates as the text they are."""


_Constructor.add_constructor("tag:yaml.org,2002:timestamp", RoundTripConstructor.construct_yaml_str)


def _short_tag(tag: str) -> str:
    prefix = "tag:yaml.org,2002:"
    return "!!" + tag[len(prefix) :] if tag.startswith(prefix) else tag


def _yaml() -> YAML:
    yaml = YAML(typ="rt", pure=True)
    yaml.Composer, yaml.Constructor = _Composer, _Constructor
    yaml.allow_duplicate_keys = False
    yaml.max_depth = MAX_DEPTH
    return yaml


def _parse_yaml(text: str, source: str) -> tuple[Any, Lines]:
    try:
        data = _read_yaml(text)
    except _Refused as refused:
        raise SpecError(refused.message(source)) from None
    except MaxDepthExceededError as err:
        where = f"{source}:{err.problem_mark.line + 1}"
        raise SpecError(f"{where} nested more than {MAX_DEPTH} levels deep; a spec needs a few") from None
    except MarkedYAMLError as err:
        raise SpecError(_yaml_error_text(err, source)) from None
    except YAMLError as err:
        raise SpecError(f"{source}: cannot read YAML: {err}") from None
    lines: Lines = {(): data.lc.line + 1} if isinstance(data, (CommentedMap, CommentedSeq)) else {}
    data = _plain(data, (), lines)
    _require_mapping(data, source)
    return data, lines


def _read_yaml(text: str) -> Any:
    """The document as ruamel.yaml's round-trip data; refusals first, before any is built."""
    yaml = _yaml()
    constructor, parser = yaml.get_constructor_parser(text)
    try:
        node = constructor.composer.get_single_node()
        if node is None:
            return None
        _refuse(node, (), constructor.composer.refused)
        try:
            return constructor.construct_document(node)
        except DuplicateKeyError as err:
            raise _duplicate(node, err) from None
    finally:
        parser.dispose()


def _refuse(node: Node, path: Loc, refused: dict[int, str]) -> None:
    """Raise the first construct a spec does not allow, with its field path."""
    if id(node) in refused:
        raise _Refused(node.start_mark.line + 1, refused[id(node)], path)
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if id(key_node) in refused:
                raise _Refused(line, refused[id(key_node)], path)
            if not isinstance(key_node, ScalarNode):
                raise _Refused(line, "a key must be a plain name, not a list or mapping", path)
            if key_node.tag == _MERGE_TAG:
                raise _Refused(line, "merge keys (<<) are not supported; use matrix: to share settings", path)
            _refuse(value_node, (*path, key_node.value), refused)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            _refuse(item, (*path, i), refused)


def _duplicate(root: Node, err: DuplicateKeyError) -> _Refused:
    """ruamel.yaml's duplicate key error as a refusal at the key's field path."""
    again = err.problem_mark.line + 1
    for path, mapping in _mappings(root, ()):
        keys = [k for k, _ in mapping.value]
        for key in keys:
            if (key.start_mark.line, key.start_mark.column) == (err.problem_mark.line, err.problem_mark.column):
                first = next(k for k in keys if k.value == key.value).start_mark.line + 1
                text = f"duplicate key {key.value!r} (first at line {first}, again at line {again})"
                return _Refused(again, text, (*path, key.value))
    return _Refused(again, f"duplicate key: {err.problem}")


def _mappings(node: Node, path: Loc) -> Iterator[tuple[Loc, MappingNode]]:
    if isinstance(node, MappingNode):
        yield path, node
        for key_node, value_node in node.value:
            yield from _mappings(value_node, (*path, key_node.value))
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            yield from _mappings(item, (*path, i))


def _plain(value: Any, path: Loc, lines: Lines) -> Any:
    """Plain Python data of round-trip data, noting each key's and item's line."""
    if isinstance(value, CommentedMap):
        out = {}
        for raw_key, item in value.items():
            key = _plain(raw_key, (), {})
            lines[(*path, key)] = value.lc.key(raw_key)[0] + 1
            out[key] = _plain(item, (*path, key), lines)
        return out
    if isinstance(value, CommentedSeq):
        for i in range(len(value)):
            lines[(*path, i)] = value.lc.item(i)[0] + 1
        return [_plain(item, (*path, i), lines) for i, item in enumerate(value)]
    if isinstance(value, (bool, ScalarBoolean)):  # ScalarBoolean is an int
        return bool(value)
    for kind in (int, float, str):  # ruamel.yaml's ScalarFloat, ScalarInt, ...: subclasses
        if isinstance(value, kind):
            return kind(value)
    return value


def _yaml_error_text(err: MarkedYAMLError, source: str) -> str:
    mark = err.problem_mark or err.context_mark
    where = f"{source}:{mark.line + 1}" if mark else source
    context = f" ({err.context})" if err.context else ""
    return f"{where} YAML syntax error: {err.problem or 'unreadable'}{context}"


# --- JSON ---


class _DuplicateKey(Exception):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _parse_json(text: str, source: str) -> tuple[Any, Lines]:
    try:
        data = json.loads(text, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as err:
        raise SpecError(f"{source}:{err.lineno} JSON syntax error: {err.msg} (column {err.colno})") from None
    except _DuplicateKey as dup:
        _json_lines(text, source)  # raises it with its line, where YAML reads the file
        raise SpecError(f"{source}: duplicate key {dup.args[0]!r}") from None
    _require_mapping(data, source)
    return data, _json_lines(text, source)


def _json_lines(text: str, source: str) -> Lines:
    """Key and item lines of a valid JSON text, from its reading as YAML; {} if none."""
    try:
        data = _read_yaml(text.replace("\t", " "))  # tabs: whitespace outside JSON strings, never inside
    except _Refused as refused:  # a duplicate key: the only refusal JSON can hold
        raise SpecError(refused.message(source)) from None
    except YAMLError:
        return {}
    lines: Lines = {(): data.lc.line + 1} if isinstance(data, (CommentedMap, CommentedSeq)) else {}
    _plain(data, (), lines)
    return lines
