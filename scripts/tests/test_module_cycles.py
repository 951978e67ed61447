"""scripts/module_cycles.py: it must see an import circle wherever one is written, and nothing
where there is none. The control is lockkit as it was before it was layered, whose circle the
tool must report."""

from __future__ import annotations

import importlib.util
import subprocess
import tarfile
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("module_cycles", ROOT / "scripts" / "module_cycles.py")
module_cycles = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module_cycles)

# The last commit whose lockkit had the circle through core, backend, hold and the primitives.
BEFORE_LAYERING = "cadcd3a"


def crate(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def circles(src: Path) -> list[set[str]]:
    return [{"::".join(m) for m in scc} for _, scc, _ in module_cycles.circles(module_cycles.Crate(src))]


def test_a_direct_circle_is_found(tmp_path):
    src = crate(tmp_path, {
        "lib.rs": "mod a;\nmod b;\nmod c;\n",
        "a.rs": "use crate::b::B;\npub struct A;\n",
        "b.rs": "pub struct B(crate::a::A);\n",
        "c.rs": "use crate::a::A;\n",
    })
    assert circles(src) == [{"a", "b"}]


def test_use_groups_nested_modules_and_root_reexports_make_edges(tmp_path):
    src = crate(tmp_path, {
        "lib.rs": "mod core;\nmod backend;\npub use core::Config;\n",
        "core.rs": "use crate::{backend::{single::Single}};\npub struct Config;\n",
        "backend/mod.rs": "mod single;\npub(crate) use single::Single;\n",
        "backend/single.rs": "pub struct Single(crate::Config);\n",
    })
    assert circles(src) == [{"backend", "core"}]


def test_a_parent_naming_its_children_is_no_circle(tmp_path):
    src = crate(tmp_path, {
        "lib.rs": "mod backend;\n",
        "backend/mod.rs": "mod single;\nuse self::single::S;\npub trait Backend {}\n",
        "backend/single.rs": "use super::Backend;\npub struct S;\n",
    })
    assert circles(src) == []


def test_siblings_inside_a_module_are_checked_too(tmp_path):
    src = crate(tmp_path, {
        "lib.rs": "mod backend;\n",
        "backend/mod.rs": "mod a;\nmod b;\n",
        "backend/a.rs": "use super::b::B;\npub struct A;\n",
        "backend/b.rs": "use super::a::A;\npub struct B;\n",
    })
    assert circles(src) == [{"backend::a", "backend::b"}]


def test_comments_and_strings_make_no_edge(tmp_path):
    src = crate(tmp_path, {
        "lib.rs": "mod a;\nmod b;\n",
        "a.rs": "//! see [`crate::b::B`]\nuse crate::b::B;\n",
        "b.rs": '/* crate::a::x */ const S: &str = "crate::a::A"; const R: &str = r#"crate::a"#;\n',
    })
    assert circles(src) == []


def test_lockkit_is_layered_now():
    assert circles(ROOT / "lockkit" / "src") == []


def test_control_lockkit_before_layering_has_its_circle(tmp_path):
    """The tool saw the circle the issue describes before the layering removed it."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", BEFORE_LAYERING, "lockkit/src"],
            check=True, capture_output=True,
        ).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        pytest.skip(f"commit {BEFORE_LAYERING} is not in this clone")
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(tmp_path)
    found = circles(tmp_path / "lockkit" / "src")
    assert len(found) == 1
    assert {"core", "backend", "hold", "primitives", "acquire", "lease"} <= found[0]
