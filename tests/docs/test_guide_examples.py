"""The guide's examples run as shown: every command and snippet of every chapter, its links,
and the index that orients the reader."""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from deepinfer_tui.guide import (
    INDEX,
    LANGUAGES,
    Chapter,
    examples,
    linked_chapter,
    links,
    list_chapters,
    read_chapter,
    references,
)

REPO = Path(__file__).resolve().parents[2]
GUIDES = REPO / "deepinfer_tui" / "guides"

# The commands that run headless and finish by themselves: the only ones a chapter may show
# in a console block (the debugger itself is opened with the keys a chapter names).
HEADLESS = {"demo", "generate", "bounded", "export", "replay", "guide"}


def _chapter_params(lang: str = "en") -> list[pytest.param]:
    return [pytest.param(c, id=f"{c.lang}-{c.id}") for c in list_chapters(lang)]


def _all_chapter_params() -> list[pytest.param]:
    return [param for lang in LANGUAGES for param in _chapter_params(lang)]


def _snippet_params() -> list[pytest.param]:
    return [
        pytest.param(chapter, number, id=f"{chapter.id}-{number}")
        for chapter in list_chapters("en")
        for number in range(len(examples(chapter).snippets))
    ]


def _shows(output: str, shown: str) -> bool:
    """Whether one printed line holds `shown`, each `...` of it standing for any text."""
    pattern = ".*?".join(re.escape(part.strip()) for part in shown.split("..."))
    return any(re.search(pattern, line) for line in output.splitlines())


def _subcommand(line: str) -> str:
    words = shlex.split(line)
    assert words[0] == "deepinfer-tui", f"not a deepinfer-tui command: {line}"
    return next(word for word in words[1:] if not word.startswith("-"))


# -- what the chapters give the reader to run -------------------------------------------------


@pytest.mark.parametrize("chapter", _all_chapter_params())
def test_every_chapter_gives_commands_and_snippets_with_their_output(chapter: Chapter) -> None:
    found = examples(chapter)
    assert found.commands and found.snippets, f"chapter {chapter.id} has nothing to run"
    for command in found.commands:
        assert _subcommand(command.line) in HEADLESS, command.line
        assert command.shown, f"{command.line}: the chapter shows none of its output"
    for snippet in found.snippets:
        assert snippet.output and snippet.output.strip(), "a snippet without its output"


def test_both_languages_give_the_same_examples() -> None:
    for en, zh in zip(list_chapters("en"), list_chapters("zh"), strict=True):
        assert examples(en) == examples(zh), f"chapter {en.id} differs between languages"


@pytest.mark.parametrize("chapter", _chapter_params())
def test_snippets_use_only_the_public_engine_api(chapter: Chapter) -> None:
    for snippet in examples(chapter).snippets:
        for node in ast.walk(ast.parse(snippet.code)):
            if isinstance(node, ast.ImportFrom):
                assert node.module == "engine", f"imports from {node.module}"
                names = {alias.name for alias in node.names}
                assert names <= set(engine.__all__), names - set(engine.__all__)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name in sys.stdlib_module_names, f"imports {alias.name}"


@pytest.mark.parametrize(("chapter", "number"), _snippet_params())
def test_every_snippet_prints_what_its_chapter_shows(
    chapter: Chapter, number: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snippet = examples(chapter).snippets[number]
    monkeypatch.chdir(tmp_path)  # a snippet that writes files writes them here
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet.code, f"<chapter {chapter.id} snippet {number}>", "exec"), {})
    assert printed.getvalue() == snippet.output


@pytest.mark.parametrize("chapter", _chapter_params())
def test_every_command_runs_and_prints_what_its_chapter_shows(
    chapter: Chapter, tmp_path: Path
) -> None:
    # One folder per chapter, commands in order: a later one may read what an earlier wrote.
    environment = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200"}
    for command in examples(chapter).commands:
        done = subprocess.run(
            [sys.executable, "-m", "deepinfer_tui", *shlex.split(command.line)[1:]],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=environment,
            timeout=120,
        )
        assert done.returncode == 0, f"{command.line}\n{done.stdout[-2000:]}{done.stderr}"
        for shown in command.shown:
            assert _shows(done.stdout, shown), f"{command.line} did not print {shown!r}"


def test_examples_reads_console_and_python_blocks() -> None:
    text = "\n".join(
        [
            "# T",
            "```console",
            "$ deepinfer-tui demo",
            "  one line",
            "$ deepinfer-tui guide --list",
            "```",
            "```python",
            "print(1)",
            "```",
            "It prints:",
            "```text",
            "1",
            "```",
            "```python",
            "x = 2",
            "```",
            "```sh",
            "$ deepinfer-tui not-a-console-block",
            "```",
        ]
    )
    found = examples(Chapter("01", "t", "T", "en", text))
    assert [(c.line, c.shown) for c in found.commands] == [
        ("deepinfer-tui demo", ("one line",)),
        ("deepinfer-tui guide --list", ()),
    ]
    assert [(s.code, s.output) for s in found.snippets] == [
        ("print(1)\n", "1\n"),
        ("x = 2\n", None),
    ]


@pytest.mark.parametrize(
    ("output", "shown", "expected"),
    [
        ("  request-1  length     [8 26 11 6]\n", "request-1  length     [8 26 11 6]", True),
        ("  request-1  length     [8 26 11 6]\n", "request-1  length     [8 26 11 7]", False),
        ("max error: 1.8e-15 → passed\n", "max error: ... → passed", True),
        ("max error: 1.8e-15 → failed\n", "max error: ... → passed", False),
        ("tokens equal\n yes\n", "tokens equal ... yes", False),  # one line, not two
    ],
)
def test_an_excerpt_must_match_one_printed_line(output: str, shown: str, expected: bool) -> None:
    assert _shows(output, shown) is expected


def _prose(chapter: Chapter) -> str:
    """The chapter without its fenced blocks."""
    return re.sub(r"^```.*?^```$", "", chapter.text, flags=re.M | re.S)


def _mentions(chapter: Chapter) -> list[str]:
    """Every `deepinfer-tui ...` the chapter's prose names in backticks."""
    return re.findall(r"`(deepinfer-tui(?: [^`]*)?)`", _prose(chapter))


@pytest.mark.parametrize("chapter", _all_chapter_params())
def test_a_command_named_in_the_prose_is_one_the_chapter_runs(chapter: Chapter) -> None:
    run = {command.line for command in examples(chapter).commands}
    for mention in _mentions(chapter):
        words = shlex.split(mention)[1:]
        if words and words[0] in HEADLESS and len(words) > 1:
            assert mention in run, f"chapter {chapter.id} names {mention!r} but never runs it"


def test_the_small_pool_of_chapter_05_evicts_for_space_and_defers() -> None:
    """The debugger cannot run headless, so the chapter's `deepinfer-tui --num-blocks N` is
    replayed as the session it would open: the default scenario with that pool."""
    from deepinfer_tui.scenario import default_scenario
    from deepinfer_tui.session import Session

    for lang in LANGUAGES:
        (mention,) = [m for m in _mentions(read_chapter("05", lang)) if "--num-blocks" in m]
        flag, blocks = shlex.split(mention)[1:]
        assert flag == "--num-blocks"
        session = Session(default_scenario().with_overrides(num_blocks=int(blocks)))
        session.run()
        log = session.log()
        assert any(e["kind"] == "evict" and e["reason"] == "evicted for space" for e in log)
        assert any(e["kind"] == "deferred" for e in log)
        finished = [r for r in session.snapshot()["requests"] if r["status"] == "finished"]
        assert len(finished) == len(session.snapshot()["requests"])


# -- links between chapters and languages -----------------------------------------------------


@pytest.mark.parametrize("chapter", _all_chapter_params())
def test_every_chapter_links_to_its_translation(chapter: Chapter) -> None:
    other = next(lang for lang in LANGUAGES if lang != chapter.lang)
    folder = GUIDES / chapter.lang
    targets = [(folder / href).resolve() for href in links(chapter)]
    translation = GUIDES / other / f"{chapter.id}-{chapter.slug}.md"
    assert translation.resolve() in targets, f"chapter {chapter.id} does not link to {other}"
    for href in links(chapter):  # every link is to a chapter file that exists
        assert (folder / href).is_file(), href
        assert linked_chapter(href, chapter.lang) is not None, href
    # The link sits next to the title, where a reader looks for it.
    assert f"../{other}/{translation.name}" in "\n".join(chapter.text.splitlines()[:3])


@pytest.mark.parametrize("lang", LANGUAGES)
def test_linked_chapter_follows_chapter_links_only(lang: str) -> None:
    other = next(code for code in LANGUAGES if code != lang)
    assert linked_chapter("02-hot-warm-cold.md", lang) == read_chapter("02", lang)
    assert linked_chapter(f"../{other}/05-paged-kv-pool.md", lang) == read_chapter("05", other)
    for href in (
        "https://example.com/02-hot-warm-cold.md",
        "../fr/02-hot-warm-cold.md",
        "../../engine/02-hot-warm-cold.md",
        "02-not-a-chapter.md",
        "99-index.md",
        "#try-it",
    ):
        assert linked_chapter(href, lang) is None, href


# -- the index --------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_index_is_chapter_00_and_listed_first(lang: str) -> None:
    index = read_chapter(INDEX, lang)
    assert index.id == "00" and index.slug == "index"
    assert read_chapter("0", lang) == read_chapter("index", lang) == index
    assert list_chapters(lang)[0] == index
    assert [c.id for c in list_chapters(lang)[1:]] == [f"{n:02d}" for n in range(1, 8)]


def _index_entries(index: Chapter) -> dict[str, str]:
    """Chapter file name -> the text of the index's list item that links to it."""
    entries: dict[str, str] = {}
    current = None
    for line in index.text.splitlines():
        link = re.match(r"- \[[^\]]+\]\(([^)]+)\)", line)
        if link:
            current = link[1]
            entries[current] = line
        elif current and line.startswith("  ") and line.strip():
            entries[current] += "\n" + line
        else:
            current = None
    return entries


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_index_names_each_chapters_keys_and_commands_in_order(lang: str) -> None:
    index = read_chapter(INDEX, lang)
    entries = _index_entries(index)
    chapters = list_chapters(lang)[1:]
    assert list(entries) == [f"{c.id}-{c.slug}.md" for c in chapters]  # reading order
    for chapter in chapters:
        entry = entries[f"{chapter.id}-{chapter.slug}.md"]
        named = re.findall(r"`([^`]+)`", entry)
        keys = {item for item in named if not item.startswith("deepinfer-tui")}
        commands = {item for item in named if item.startswith("deepinfer-tui")}
        assert keys == set(references(chapter).keys), f"{chapter.id}: keys {keys}"
        run = {f"deepinfer-tui {_subcommand(c.line)}" for c in examples(chapter).commands}
        assert commands == run, f"{chapter.id}: commands {commands}, chapter runs {run}"
        assert chapter.id in entry.split("]")[0]  # the link names the chapter's number
