"""The column reference of docs/results.md, generated from omni's column registry.

    python scripts/columns_doc.py                          # print the markdown tables
    python scripts/columns_doc.py --write docs/results.md  # rewrite the block between the markers
    python scripts/columns_doc.py --check docs/results.md  # exit 1 when that block is not current

The registry (omni.store.columns.COLUMNS) is the one place a column is declared; the
doc is derived from it, and a unit test runs --check on the checked-in doc so a
column added without regenerating fails CI.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # omni from this checkout

import pyarrow as pa  # noqa: E402

from omni.store.column_type import Column  # noqa: E402
from omni.store.columns import COLUMNS, SCHEMA_VERSION  # noqa: E402

BEGIN = "<!-- columns:begin -->"
END = "<!-- columns:end -->"


def type_name(kind: pa.DataType) -> str:
    """A column type as a reader of the Parquet files sees it: int32, list<string>, timestamp[us, UTC]."""
    if pa.types.is_list(kind):
        return f"list<{type_name(kind.value_type)}>"
    if pa.types.is_timestamp(kind):
        return f"timestamp[{kind.unit}, {kind.tz}]" if kind.tz else f"timestamp[{kind.unit}]"
    if pa.types.is_boolean(kind):
        return "bool"
    return str(kind)


def meaning(col: Column) -> str:
    text = col.meaning
    if col.better:
        text += f"; {col.better} is better"
    if col.choices:
        text += f"; one of {', '.join(col.choices)}"
    if col.is_json and "JSON" not in text:
        text += " (JSON text)"
    # a table cell: no pipes, and no <name> a renderer would take for an HTML tag
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def column_tables(columns: tuple[Column, ...] = COLUMNS) -> str:
    """One markdown table per registry group, in the registry's order."""
    groups: dict[str, list[Column]] = {}
    for col in columns:
        groups.setdefault(col.group, []).append(col)
    parts = [f"Schema version {SCHEMA_VERSION}: {len(columns)} columns in {len(groups)} groups."]
    for group, cols in groups.items():
        rows = [f"| `{c.name}` | `{type_name(c.type)}` | {c.unit or ''} | {meaning(c)} |" for c in cols]
        parts.append("\n".join([f"### {group}", "", "| name | type | unit | meaning |", "|---|---|---|---|", *rows]))
    return "\n\n".join(parts)


def with_block(doc: str, block: str) -> str:
    """``doc`` with the text between the markers replaced by ``block``."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {BEGIN} ... {END} block")
    return doc[: start + len(BEGIN)] + "\n" + block + "\n" + doc[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", metavar="DOC", type=Path, help="exit 1 when DOC's column block is not current")
    mode.add_argument("--write", metavar="DOC", type=Path, help="rewrite DOC's column block")
    args = parser.parse_args(argv)
    block = column_tables()
    doc_path = args.check or args.write
    if doc_path is None:
        print(block)
        return 0
    try:
        doc = doc_path.read_text()
        current = with_block(doc, block)
    except (OSError, ValueError) as error:
        print(f"error: {doc_path}: {error}", file=sys.stderr)
        return 2
    if args.write:
        if current != doc:
            doc_path.write_text(current)
        return 0
    if current != doc:
        print(
            f"{doc_path}: the column reference is not current with omni.store.columns.COLUMNS; "
            f"run python scripts/columns_doc.py --write {doc_path}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
