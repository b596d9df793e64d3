"""The in-app guide: a chapter list beside a Markdown viewer, in English or Chinese. It opens
on the index (chapter 00) unless asked for a chapter; links between chapters are followed in
place, links to a translation switch the language."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Header, Markdown, MarkdownViewer, OptionList
from textual.widgets.option_list import Option

from deepinfer_tui.guide import (
    INDEX,
    LANGUAGES,
    Chapter,
    for_terminal,
    linked_chapter,
    list_chapters,
    read_chapter,
)

LANGUAGE_NAMES = {"en": "English", "zh": "中文"}


class ChapterViewer(MarkdownViewer):
    """A viewer that leaves links to the guide screen: MarkdownViewer would look for the
    linked file on disk, where a packaged chapter need not be."""

    def _on_markdown_link_clicked(self, message: Markdown.LinkClicked) -> None:
        message.prevent_default()  # the screen handles it as the message bubbles up


class GuideScreen(Screen[None]):
    """Read the walkthrough chapters without leaving the debugger."""

    DEFAULT_CSS = """
    GuideScreen #guide-body {
        height: 1fr;
    }
    GuideScreen #guide-chapters {
        width: 28;
        max-width: 40%;
        height: 1fr;
        border: none;
        border-right: vkey $primary 50%;
        padding: 0 1;
    }
    GuideScreen #guide-viewer {
        width: 1fr;
        height: 1fr;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "toggle_language", "English / 中文"),
        Binding("escape,q", "close", "Close guide"),
    ]

    def __init__(self, chapter: str = INDEX, lang: str = "en") -> None:
        super().__init__()
        # Validate now: a bad chapter or language is a programming error at the call site.
        self.chapter: Chapter = read_chapter(chapter, lang)

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="guide-body"):
            yield OptionList(*self._options(), id="guide-chapters")
            yield ChapterViewer(
                for_terminal(self.chapter),
                show_table_of_contents=False,
                open_links=False,  # a chapter link is not a web page: the screen follows it
                id="guide-viewer",
            )
        yield Footer()

    def on_mount(self) -> None:
        self.title = "Guide"
        self._update_subtitle()
        chapters = self.query_one("#guide-chapters", OptionList)
        chapters.highlighted = chapters.get_option_index(self.chapter.id)
        chapters.focus()

    def _options(self) -> list[Option]:
        return [Option(self._label(c), id=c.id) for c in list_chapters(self.chapter.lang)]

    @staticmethod
    def _label(chapter: Chapter) -> str:
        return f"{chapter.id}  {chapter.title}"

    def _update_subtitle(self) -> None:
        self.sub_title = f"{self.chapter.title} · {LANGUAGE_NAMES[self.chapter.lang]}"

    async def _show(self, chapter: Chapter) -> None:
        if chapter == self.chapter and self.is_mounted:
            return
        self.chapter = chapter
        self._update_subtitle()
        viewer = self.query_one("#guide-viewer", MarkdownViewer)
        await viewer.document.update(for_terminal(chapter))
        viewer.scroll_home(animate=False)

    async def _open(self, chapter: Chapter) -> None:
        """Show `chapter`, in its language, with the chapter list following."""
        if chapter.lang != self.chapter.lang:
            self._relabel(chapter.lang)
        chapters = self.query_one("#guide-chapters", OptionList)
        await self._show(chapter)
        chapters.highlighted = chapters.get_option_index(chapter.id)

    async def on_markdown_link_clicked(self, event: Markdown.LinkClicked) -> None:
        event.stop()
        chapter = linked_chapter(event.href, self.chapter.lang)
        if chapter is not None:
            await self._open(chapter)
        elif "://" in event.href:
            self.app.open_url(event.href)
        else:
            self.notify(f"Not a guide chapter: {event.href}", severity="warning")

    async def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id is not None and event.option.id != self.chapter.id:
            await self._show(read_chapter(event.option.id, self.chapter.lang))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        # Enter on a chapter: move into the text so the arrow keys scroll it.
        self.query_one("#guide-viewer", MarkdownViewer).document.focus()

    def _relabel(self, lang: str) -> None:
        chapters = self.query_one("#guide-chapters", OptionList)
        for translated in list_chapters(lang):
            chapters.replace_option_prompt(translated.id, self._label(translated))

    async def action_toggle_language(self) -> None:
        other = LANGUAGES[(LANGUAGES.index(self.chapter.lang) + 1) % len(LANGUAGES)]
        self._relabel(other)
        await self._show(read_chapter(self.chapter.id, other))

    def action_close(self) -> None:
        self.app.pop_screen()
