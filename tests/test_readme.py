"""The README's library example is code a newcomer will paste: it must run as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_library_example_runs(capsys) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "the README shows the library in use"
    exec(compile(blocks[0], "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "request-1" in printed and printed.splitlines()[-1] in ("queued", "running")


def test_readme_quick_start_is_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert "python -m pip install . && deepinfer-tui" in text
    assert "python -m pip install '.[test]' && python -m pytest" in text
