"""The export's round diff: what the last operation changed, as the diff pane (key 6) shows
it, from the app's export (live and replay) and from `export --steps N`."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from deepinfer_tui.cli.program import main
from deepinfer_tui.document_views import NO_FRAME_BEFORE
from deepinfer_tui.export import render_document
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session

from .helpers import make_app, wait_until


def exported_text(directory: Path) -> str:
    (text,) = directory.glob("*.txt")
    return text.read_text()


def diff_part(text: str) -> str:
    return text.split("Round diff", 1)[1].split("Commit log", 1)[0]


async def test_the_apps_export_holds_what_the_last_step_changed(tmp_path: Path) -> None:
    app = make_app(export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "space", "6")
        await pilot.pause()
        on_screen = str(app.query_one("#diff-lines", Static).render()).splitlines()
        await pilot.press("e")
        assert await wait_until(pilot, lambda: any(tmp_path.glob("*.txt")))
    shown = diff_part(exported_text(tmp_path))
    assert "t1 → t2 · step" in shown
    # Round 2 of the built-in scenario commits tokens for its two running requests.
    assert "committed" in shown and "request-1" in shown
    assert on_screen  # the pane's own lines: the document says the same first line
    assert on_screen[0].strip() in shown


def test_export_steps_n_diffs_the_last_round_and_to_the_end_says_why_not(tmp_path: Path) -> None:
    stepped, to_end = tmp_path / "stepped", tmp_path / "end"
    assert main(["export", "--steps", "2", "--out", str(stepped), "--format", "txt"]) == 0
    assert "t1 → t2 · step" in diff_part(exported_text(stepped))
    assert main(["export", "--out", str(to_end), "--format", "txt"]) == 0
    assert NO_FRAME_BEFORE.split(":")[0] in " ".join(diff_part(exported_text(to_end)).split())


def test_a_session_without_a_frame_before_exports_no_diff() -> None:
    session = Session(default_scenario())
    session.step()
    text = render_document(session)["txt"]
    assert "Round diff" in text and "t0 → t1" not in text
