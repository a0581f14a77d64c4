"""Write one API reference page per module of the seq2seq package, at build time.

mkdocs-gen-files runs this script on every `mkdocs build`: it walks seq2seq/**.py and writes
``reference/<module path>.md`` holding ``::: seq2seq.<module>`` (mkdocstrings renders the
docstrings) plus ``reference/SUMMARY.md``, the navigation mkdocs-literate-nav reads. Nothing
here names a module, so splitting or moving modules needs no edit of the docs.
"""

from __future__ import annotations

from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "seq2seq"

nav = mkdocs_gen_files.Nav()
for path in sorted(PACKAGE.rglob("*.py")):
    module = path.relative_to(ROOT).with_suffix("")
    parts = tuple(module.parts)
    if parts[-1] == "__main__":
        continue  # `python -m seq2seq.cli`: a two-line runner, nothing to document
    if parts[-1] == "__init__":
        parts = parts[:-1]
        doc_path = Path(*parts, "index.md")
    else:
        doc_path = module.with_suffix(".md")
    nav[parts] = doc_path.as_posix()
    with mkdocs_gen_files.open(Path("reference", doc_path), "w") as page:
        page.write(f"::: {'.'.join(parts)}\n")
    mkdocs_gen_files.set_edit_path(Path("reference", doc_path), path.relative_to(ROOT))

with mkdocs_gen_files.open("reference/SUMMARY.md", "w") as summary:
    summary.writelines(nav.build_literate_nav())
