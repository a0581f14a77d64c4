"""The README's Python API example runs as written (on a tiny model instead of the demo's)."""

from __future__ import annotations

import re
from pathlib import Path

from factories import make_model_dir

README = Path(__file__).resolve().parents[1] / "README.md"
DEMO_DIR = "runs/demo/averaged"


def python_api_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the Python API section has one python example"
    return blocks[0]


def test_the_python_api_example_runs(tmp_path, capsys):
    code = python_api_example()
    assert f'model_dir = "{DEMO_DIR}"' in code
    model_dir = make_model_dir(tmp_path / "model", train_steps=60)
    code = code.replace(f'"{DEMO_DIR}"', repr(str(model_dir)))
    exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("[") and len(out) == 1 + 3 + 1  # translate, 3-best, score
    assert out[-1].startswith("log-prob ") and out[-1].endswith(" tokens")
