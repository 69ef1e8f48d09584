"""docs/results.md's column reference is generated from the registry and kept current."""

import importlib.util

from omni import REPO_ROOT
from omni.store.columns import COLUMNS

DOC = REPO_ROOT / "docs" / "results.md"


def _script():
    spec = importlib.util.spec_from_file_location("columns_doc", REPO_ROOT / "scripts" / "columns_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_column_reference_is_current(capsys):
    # fails when a column is added to omni.store.columns without regenerating the doc
    assert _script().main(["--check", str(DOC)]) == 0, capsys.readouterr().err


def test_every_column_is_in_the_reference():
    text = DOC.read_text()
    assert [c.name for c in COLUMNS if f"| `{c.name}` |" not in text] == []


def test_a_stale_copy_fails_naming_the_fix(tmp_path, capsys):
    script = _script()
    stale = tmp_path / "results.md"
    stale.write_text(DOC.read_text().replace(f"| `{COLUMNS[-1].name}` |", "| `a_column_since_removed` |"))
    assert script.main(["--check", str(stale)]) == 1
    assert f"run python scripts/columns_doc.py --write {stale}" in capsys.readouterr().err
    assert script.main(["--write", str(stale)]) == 0
    assert stale.read_text() == DOC.read_text()
    assert script.main(["--check", str(stale)]) == 0


def test_a_doc_without_the_markers_is_an_error(tmp_path, capsys):
    bare = tmp_path / "bare.md"
    bare.write_text("# no column block here\n")
    assert _script().main(["--check", str(bare)]) == 2
    assert "columns:begin" in capsys.readouterr().err
