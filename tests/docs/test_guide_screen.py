"""The guide screen opens on the index and follows links between chapters and languages,
driven by real keys and clicks."""

from __future__ import annotations

import re

from rich.cells import cell_len
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Markdown, MarkdownViewer, OptionList
from textual.widgets.markdown import MarkdownBlock

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.guide import for_terminal, list_chapters, read_chapter
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.screens.guide import GuideScreen
from deepinfer_tui.session import Session

SIZE = (120, 40)
CJK = re.compile(r"[\u4e00-\u9fff]")


class PlainGuideApp(App[None]):
    """Opens the guide as the debugger's `g` key does: no chapter chosen."""

    def on_mount(self) -> None:
        self.push_screen(GuideScreen())


def _shown(app: App[None]) -> str:
    return app.screen.query_one(MarkdownViewer).document.source


def _highlighted(app: App[None]) -> int | None:
    return app.screen.query_one(OptionList).highlighted


async def _click_text(pilot: Pilot[None], text: str) -> None:
    """Click the first place the guide's text shows `text` (a link's words, say)."""
    viewer = pilot.app.screen.query_one(MarkdownViewer)
    for block in viewer.document.query(MarkdownBlock):
        lines = [strip.text for strip in block.render_lines(block.content_region.reset_offset)]
        for row, line in enumerate(lines):
            column = line.find(text)
            if column < 0:
                continue
            viewer.scroll_to_widget(block, animate=False, top=True)
            await pilot.pause()
            dx = block.content_region.x - block.region.x
            dy = block.content_region.y - block.region.y
            x = dx + cell_len(line[:column]) + 1  # a Chinese character is two cells wide
            assert await pilot.click(block, offset=(x, dy + row))
            await pilot.pause()
            return
    raise AssertionError(f"the guide does not show {text!r}")


async def test_g_in_the_debugger_opens_the_guide_on_the_index() -> None:
    app = DebuggerApp(Session(default_scenario()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, GuideScreen)
        index = read_chapter("00")
        assert _shown(app) == index.text and _highlighted(app) == 0
        assert index.title in app.screen.sub_title
        await pilot.press("down")
        await pilot.pause()
        assert _shown(app) == read_chapter("01").text
        await pilot.press("l")  # the index in Chinese is chapter 00 too
        await pilot.press("up")
        await pilot.pause()
        assert _shown(app) == for_terminal(read_chapter("00", "zh"))
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, GuideScreen)


async def test_a_link_in_the_index_opens_its_chapter() -> None:
    app = PlainGuideApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert _shown(app) == read_chapter("00").text
        await _click_text(pilot, "Hot, warm and cold restoration")
        assert _shown(app) == read_chapter("02").text
        assert _highlighted(app) == 2  # the chapter list follows
        await _click_text(pilot, "All chapters")
        assert _shown(app) == read_chapter("00").text and _highlighted(app) == 0


async def test_the_translation_link_switches_the_language_and_back() -> None:
    app = PlainGuideApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down", "down", "down")
        await pilot.pause()
        chapter = read_chapter("03")
        assert _shown(app) == chapter.text
        await _click_text(pilot, f"zh/03-{chapter.slug}.md")
        assert _shown(app) == for_terminal(read_chapter("03", "zh"))
        assert _highlighted(app) == 3
        chapters = app.screen.query_one(OptionList)
        titles = [str(chapters.get_option_at_index(i).prompt) for i in range(8)]
        assert titles == [f"{c.id}  {c.title}" for c in list_chapters("zh")]
        await _click_text(pilot, f"en/03-{chapter.slug}.md")
        assert _shown(app) == chapter.text
        assert not CJK.search(str(chapters.get_option_at_index(0).prompt))
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, GuideScreen) and app.is_running


async def test_a_link_that_is_no_chapter_is_a_notification() -> None:
    app = PlainGuideApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        document = app.screen.query_one(MarkdownViewer).document
        document.post_message(Markdown.LinkClicked(document, "notes/elsewhere.md"))
        await pilot.pause()
        assert _shown(app) == read_chapter("00").text  # nothing moved
        assert [n.message for n in app._notifications] == [
            "Not a guide chapter: notes/elsewhere.md"
        ]
