"""The documentation: the site builds strictly, the README's links land, no machine's paths.

The strict build turns every warning into an error: a broken link or anchor between pages, a
page missing from the navigation, and griffe's docstring warnings (an ``Args:`` entry that names
no parameter of its function) in the API reference that docs/gen_reference.py generates.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# Absolute paths of a development machine; commands in the docs use runs/... and $SEQ2SEQ_MIRROR.
MACHINE_PATH = re.compile(r"(?<![\w.$~])/(?:work|home|root|tmp|mnt|data|Users)/")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: pip install -e '.[docs]' (make install does)")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", DISABLE_MKDOCS_2_WARNING="true")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out),
         "--config-file", str(ROOT / "mkdocs.yml")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert proc.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(
        warnings or proc.stderr.splitlines()[-30:]
    )
    return out


@pytest.mark.slow
def test_the_site_builds_strictly_with_a_reference_page_per_module(site):
    assert (site / "index.html").is_file()
    modules = [
        p for p in (ROOT / "seq2seq").rglob("*.py") if p.stem not in ("__init__", "__main__")
    ]
    for module in modules:
        page = site / "reference" / module.relative_to(ROOT).with_suffix("") / "index.html"
        assert page.is_file(), f"no API reference page for {module.relative_to(ROOT)}"


@pytest.mark.slow
def test_the_readme_links_into_the_docs_land(site):
    links = re.findall(r"\]\(docs/([^)#\s]+)(?:#([^)\s]+))?\)", README.read_text(encoding="utf-8"))
    assert links, "the README links its docs pages"
    for page, anchor in links:
        path = DOCS / page
        assert path.exists(), f"README links docs/{page}, which does not exist"
        if anchor:
            html = site / Path(page).with_suffix("") / "index.html"
            if page == "index.md":
                html = site / "index.html"
            assert f'id="{anchor}"' in html.read_text(encoding="utf-8"), (
                f"README links docs/{page}#{anchor}: no such heading"
            )


def test_the_readme_stays_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines; details belong in docs/"


def test_no_absolute_path_of_a_machine_in_docs_or_benchmarks():
    files = [README, ROOT / "mkdocs.yml", *DOCS.glob("*.md"), *(ROOT / "benchmarks").glob("*.py")]
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]
    assert not found, "absolute paths of a machine:\n" + "\n".join(found)


def test_every_image_in_docs_is_used_by_a_page():
    text = "".join(p.read_text(encoding="utf-8") for p in [README, *DOCS.glob("*.md")])
    unused = [p.name for p in DOCS.glob("*.png") if p.name not in text]
    assert not unused, f"images no page uses (delete them): {', '.join(unused)}"
