"""The built-in guide: both languages, real keys, real files, runnable test commands, the screen."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len
from textual.app import App
from textual.widgets import MarkdownViewer, OptionList
from textual.widgets.markdown import MarkdownBlock

from deepinfer_tui.guide import (
    LANGUAGES,
    Chapter,
    for_terminal,
    list_chapters,
    read_chapter,
    references,
)
from deepinfer_tui.screens.guide import GuideScreen

REPO = Path(__file__).resolve().parents[2]

# The chapters the guide promises (issue 8), in reading order, after the index (issue 19).
EXPECTED_IDS = ["00", "01", "02", "03", "04", "05", "06", "07"]

# The debugger's keys as documented for users (issue 3, issue 5, issue 6, issue 8).
DOCUMENTED_KEYS = {"space", "n", "r", "c", "b", "B", "u", "a", "t", "f", "e", "g", "f1", "?", "q"}

# Textual spells some keys differently from how a person types them.
KEY_ALIASES = {"?": {"?", "question_mark"}, "B": {"B", "shift+b"}, "space": {"space", " "}}

CJK = re.compile(r"[\u4e00-\u9fff]")


def _all_chapters() -> list[Chapter]:
    return [chapter for lang in LANGUAGES for chapter in list_chapters(lang)]


def _chapter_params() -> list[pytest.param]:
    return [pytest.param(c, id=f"{c.lang}-{c.id}") for c in _all_chapters()]


def _rendered_text(viewer: MarkdownViewer) -> str:
    return "\n".join(str(block.content) for block in viewer.document.query(MarkdownBlock))


# -- the chapters themselves -----------------------------------------------------------------


def _markdown_shape(text: str) -> list[tuple[str, str, str]]:
    """Block and inline token kinds, and code (inline, indented, fenced) with its text, as the
    app's Markdown parser reads them."""
    from markdown_it import MarkdownIt

    shape = []
    for token in MarkdownIt("gfm-like").parse(text):
        code = token.content if token.type in ("code_block", "fence") else ""
        shape.append((token.type, token.tag, code))
        for child in token.children or []:
            code = child.content if child.type == "code_inline" else ""
            shape.append((child.type, child.tag, code))
    return shape


@pytest.mark.parametrize("chapter", _chapter_params())
def test_the_terminal_text_only_drops_spaces_next_to_chinese(chapter: Chapter) -> None:
    shown = for_terminal(chapter)
    if chapter.lang == "en":
        assert shown == chapter.text
        return
    assert shown != chapter.text and shown.replace(" ", "") == chapter.text.replace(" ", "")
    assert _markdown_shape(shown) == _markdown_shape(chapter.text)  # same emphasis, code, lists
    prose = [line for line in shown.splitlines() if not line.lstrip().startswith(("|", "```"))]
    for line in prose:
        text = re.sub(r"^\s*(?:[-*+]|\d+\.|#+|>)\s+", "", line)  # a list or heading marker
        # Spaces beside an emphasis mark stay: removing one could undo the emphasis.
        assert not re.search(r"[\u4e00-\u9fff，。：；] [^\s*_]|[^\s*_] [\u4e00-\u9fff]", text), line


@pytest.mark.parametrize(
    "text",
    [
        "看 **`space`** 单步",  # strong around code
        "命中 **“温”** 的行",  # strong opening on punctuation
        "中文 _x_ 中",
        "命令 `a 中` 可用 `b` 和 ``c ` d`` 中",  # code spans keep their insides
        "段落\n\n    缩进 代码\n",  # indented code
        "~~~\n中 文\n~~~\n中 文",  # a tilde fence
        "- 列表 **项** 一\n  继续 `x` 行",
        "[链接 文字](https://example.com/a b) 之后",
    ],
)
def test_the_terminal_text_keeps_any_markdown_as_it_was(text: str) -> None:
    shown = for_terminal(Chapter("01", "x", "x", "zh", text))
    assert _markdown_shape(shown) == _markdown_shape(text)


async def test_a_chinese_paragraph_fills_its_lines() -> None:
    """A terminal wraps only at spaces: one before a Latin word used to push the ideographs
    after it to the next line, leaving half of the line empty."""
    app = GuideApp(chapter="3", lang="zh")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        document = app.screen.query_one(MarkdownViewer).document
        first = next(b for b in document.query(MarkdownBlock) if "token" in str(b.content))
        width = first.content_region.width
        region = first.content_region.reset_offset
        lines = [cell_len(strip.text.rstrip()) for strip in first.render_lines(region)]
        filled = [n for n in lines if n]
        assert len(filled) >= 3
        for length in filled[:-1]:  # a wide character may leave one cell at the end
            assert length >= width - 1, (lines, width)


def test_every_chapter_exists_in_both_languages_with_the_same_ids() -> None:
    english = list_chapters("en")
    chinese = list_chapters("zh")
    assert [c.id for c in english] == EXPECTED_IDS
    assert [(c.id, c.slug) for c in chinese] == [(c.id, c.slug) for c in english]
    for en, zh in zip(english, chinese):
        assert en.lang == "en" and zh.lang == "zh"
        assert en.title and zh.title and en.title != zh.title
        assert not CJK.search(en.text), f"English chapter {en.id} contains Chinese text"
        assert len(CJK.findall(zh.text)) > 500, f"Chinese chapter {zh.id} is not in Chinese"


@pytest.mark.parametrize("chapter", _chapter_params())
def test_chapters_are_substantial(chapter: Chapter) -> None:
    if chapter.lang == "en":
        assert len(chapter.text.split()) >= 300
    else:
        assert len(CJK.findall(chapter.text)) >= 600
    assert chapter.text.startswith(f"# {chapter.title}\n")


def test_chinese_paragraphs_are_not_hard_wrapped() -> None:
    # Markdown turns a line break inside a paragraph into a space, which is wrong between two
    # Chinese characters; so a Chinese line never continues on the next one.
    wide = "\u4e00-\u9fff，。；：、（）“”"
    for chapter in list_chapters("zh"):
        wrapped = re.search(rf"[{wide}]\n[ \t]*[{wide}]", chapter.text)
        assert wrapped is None, f"chapter {chapter.id} wraps a line at {wrapped.group()!r}"


def test_read_chapter_accepts_a_number_a_padded_number_or_a_slug() -> None:
    by_padded = read_chapter("03")
    assert read_chapter("3") == by_padded
    assert read_chapter(by_padded.slug) == by_padded
    assert read_chapter(f"03-{by_padded.slug}") == by_padded
    assert read_chapter("3", lang="zh").id == "03"
    assert read_chapter("3", lang="zh").lang == "zh"


def test_unknown_chapter_is_a_key_error_listing_the_valid_ids() -> None:
    with pytest.raises(KeyError) as raised:
        read_chapter("42")
    message = str(raised.value)
    assert "'42'" in message
    for chapter_id in EXPECTED_IDS:
        assert chapter_id in message


@pytest.mark.parametrize("lang", ["fr", "", "EN", None])
def test_unknown_language_is_a_value_error_naming_it(lang: object) -> None:
    with pytest.raises(ValueError, match="language"):
        list_chapters(lang)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape(repr(lang))):
        read_chapter("01", lang)  # type: ignore[arg-type]


def test_the_guide_module_does_not_load_textual() -> None:
    code = "import sys, deepinfer_tui.guide; print('textual' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "False"


# -- what each chapter tells the reader to press, read and run -------------------------------


@pytest.mark.parametrize("chapter", _chapter_params())
def test_each_chapter_names_keys_files_and_a_test_command(chapter: Chapter) -> None:
    named = references(chapter)
    assert named.keys and named.files and named.commands


def test_both_languages_name_the_same_keys_files_and_commands() -> None:
    for en, zh in zip(list_chapters("en"), list_chapters("zh")):
        assert references(en) == references(zh), f"chapter {en.id} differs between languages"


@pytest.mark.parametrize("chapter", _chapter_params())
def test_every_named_key_is_a_documented_debugger_key(chapter: Chapter) -> None:
    unknown = set(references(chapter).keys) - DOCUMENTED_KEYS
    assert not unknown, f"chapter {chapter.id} ({chapter.lang}) names unknown keys {unknown}"


def _binding_keys(bindings: list) -> set[str]:
    keys: set[str] = set()
    for binding in bindings:
        spec = binding[0] if isinstance(binding, tuple) else binding.key
        keys.update(part.strip() for part in spec.split(","))
    return keys


def test_every_named_key_is_bound_in_the_debugger_app() -> None:
    if importlib.util.find_spec("deepinfer_tui.app") is None:
        pytest.skip("deepinfer_tui/app.py does not exist yet")
    from deepinfer_tui.app import DebuggerApp

    bound = _binding_keys(DebuggerApp.BINDINGS)
    named = {key for chapter in _all_chapters() for key in references(chapter).keys}
    missing = {key for key in named if not KEY_ALIASES.get(key, {key}) & bound}
    assert not missing, f"keys named in the guide but not bound by DebuggerApp: {missing}"


@pytest.mark.parametrize("chapter", _chapter_params())
def test_every_named_source_path_exists(chapter: Chapter) -> None:
    for path in references(chapter).files:
        assert not Path(path).is_absolute()
        assert (REPO / path).exists(), f"chapter {chapter.id} names missing path {path}"


def _test_files(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "pytest"], f"not a pytest command: {command}"
    files = [w.split("::")[0] for w in words[3:] if not w.startswith("-")]
    assert files, f"command names no test file: {command}"
    return files


@pytest.mark.parametrize("chapter", _chapter_params())
def test_every_named_test_command_refers_to_existing_test_files(chapter: Chapter) -> None:
    for command in references(chapter).commands:
        for file in _test_files(command):
            assert file.startswith("tests/") and file.endswith(".py")
            assert (REPO / file).is_file(), f"chapter {chapter.id} runs missing {file}"


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # One process: this suite's workers already use every core.
        [sys.executable, *args, "-p", "no:cacheprovider", "-n", "0"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def test_every_named_test_file_collects() -> None:
    files = sorted(
        {
            file
            for chapter in list_chapters("en")
            for command in references(chapter).commands
            for file in _test_files(command)
            if file != "tests/docs/test_guides.py"  # this file: collecting itself proves nothing
        }
    )
    done = _run(["-m", "pytest", "--collect-only", "-q", *files])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for file in files:
        assert file in done.stdout, f"{file} collected no tests"


def test_a_named_test_command_runs_and_passes() -> None:
    # Run one cheap command exactly as a chapter prints it (with `python` = this interpreter).
    chapter = read_chapter("07")
    command = next(c for c in references(chapter).commands if "test_architecture.py" in c)
    done = _run(shlex.split(command)[1:])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # Exit status 0 means tests ran and passed (pytest exits 5 when nothing was collected);
    # the doubled -q of the project's addopts leaves only the progress line to look at.
    assert "[100%]" in done.stdout or re.search(r"\b\d+ passed\b", done.stdout)


# -- the in-app guide screen -----------------------------------------------------------------


class GuideApp(App[None]):
    """The smallest app that shows the guide screen, as the debugger's `g` key would."""

    def __init__(self, chapter: str = "01", lang: str = "en") -> None:
        super().__init__()
        self.opening = (chapter, lang)

    def on_mount(self) -> None:
        chapter, lang = self.opening
        self.push_screen(GuideScreen(chapter=chapter, lang=lang))


async def test_guide_screen_switches_chapter_and_language() -> None:
    app = GuideApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, GuideScreen)
        viewer = screen.query_one(MarkdownViewer)
        chapters = screen.query_one(OptionList)
        assert chapters.option_count == len(EXPECTED_IDS)
        assert viewer.document.source == read_chapter("01").text
        assert read_chapter("01").title in _rendered_text(viewer)

        await pilot.press("down")
        await pilot.pause()
        second = read_chapter("02")
        assert viewer.document.source == second.text
        english_text = _rendered_text(viewer)
        assert second.title in english_text
        assert not CJK.search(english_text)

        await pilot.press("l")
        await pilot.pause()
        second_zh = read_chapter("02", "zh")
        assert viewer.document.source == for_terminal(second_zh)
        chinese_text = _rendered_text(viewer)
        assert second_zh.title in chinese_text
        assert len(CJK.findall(chinese_text)) > 300
        assert CJK.search(str(chapters.get_option_at_index(0).prompt))
        assert chapters.highlighted == 2  # the language changed, the chapter did not

        await pilot.press("l")
        await pilot.pause()
        assert viewer.document.source == second.text
        assert not CJK.search(_rendered_text(viewer))
        assert not CJK.search(str(chapters.get_option_at_index(0).prompt))

        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, GuideScreen)


async def test_guide_screen_opens_on_the_requested_chapter_and_closes_with_q() -> None:
    app = GuideApp(chapter="5", lang="zh")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        viewer = app.screen.query_one(MarkdownViewer)
        assert viewer.document.source == for_terminal(read_chapter("05", "zh"))
        assert app.screen.query_one(OptionList).highlighted == 5
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, GuideScreen)
        assert app.is_running  # q closed the guide; it did not quit the app


def test_guide_screen_rejects_an_unknown_chapter_or_language() -> None:
    with pytest.raises(KeyError):
        GuideScreen(chapter="99")
    with pytest.raises(ValueError):
        GuideScreen(lang="fr")
