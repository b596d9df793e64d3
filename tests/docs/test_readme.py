"""The README's examples are what a newcomer will paste: they must run as written."""

import json
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


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


def test_readme_scenario_example_loads_and_runs() -> None:
    from deepinfer_tui.scenario import parse_scenario
    from deepinfer_tui.session import Session

    (block,) = re.findall(r"```json\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    session = Session(parse_scenario(json.loads(block), "README.md"))
    session.run()
    finished = {r["id"]: r["finish_reason"] for r in session.snapshot()["requests"]}
    assert finished == {"a": "cancelled", "request-2": "length", "request-3": "length"}
    restores = {e["request_id"]: e["cache"] for e in session.log() if e["kind"] == "restore"}
    assert restores["request-3"] == "warm"  # the clock moved past the hot cursor's lifetime
    assert session.clock.now == 5.0
