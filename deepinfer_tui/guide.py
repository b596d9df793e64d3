"""The built-in guide: Markdown chapters in English and Chinese, shipped inside the package.

Chapters live in `deepinfer_tui/guides/<lang>/NN-slug.md` and are read through
importlib.resources, so they work from a source checkout and from an installed wheel alike.
This module is Textual-free: the command line prints chapters with it, the app shows them.

Chapter 00 is the index. Every chapter ends with a section whose three bullets name, in
backticks, the debugger keys that show what the chapter describes, the source files to read
and the test commands that check it; `references()` parses that section. Its fenced
`console` and `python` blocks are what the reader runs; `examples()` parses them. Tests use
both to verify that every name is real and every example still runs as shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

LANGUAGES = ("en", "zh")
INDEX = "00"  # the chapter that lists the others; the guide opens on it

# The bullet labels of the closing "see it / read it / check it" section, per language.
REFERENCE_LABELS: dict[str, tuple[str, str, str]] = {
    "en": ("See it", "Read it", "Check it"),
    "zh": ("看一看", "读一读", "测一测"),
}

_FILE_NAME = re.compile(r"^(?P<id>\d{2})-(?P<slug>[a-z0-9]+(?:-[a-z0-9]+)*)\.md$")
_BACKTICKED = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Chapter:
    id: str  # two digits, e.g. "03"
    slug: str  # e.g. "speculation-and-rollback"
    title: str  # the chapter's first-level heading
    lang: str
    text: str  # the whole Markdown document


@dataclass(frozen=True)
class References:
    """What a chapter tells the reader to press, read and run."""

    keys: tuple[str, ...]
    files: tuple[str, ...]
    commands: tuple[str, ...]


def _check_language(lang: object) -> str:
    if lang not in LANGUAGES:
        raise ValueError(f"unknown guide language {lang!r}; use one of {', '.join(LANGUAGES)}")
    return str(lang)


def _title_of(text: str, fallback: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return fallback


@cache
def _load(lang: str) -> tuple[Chapter, ...]:
    folder = resources.files("deepinfer_tui").joinpath("guides", lang)
    chapters = []
    for entry in folder.iterdir():
        match = _FILE_NAME.match(entry.name)
        if match is None:
            continue  # not a chapter (e.g. an editor's backup file)
        text = entry.read_text(encoding="utf-8")
        slug = match["slug"]
        chapters.append(Chapter(match["id"], slug, _title_of(text, slug), lang, text))
    return tuple(sorted(chapters, key=lambda chapter: chapter.id))


def list_chapters(lang: str = "en") -> list[Chapter]:
    """Every chapter in `lang`, in reading order."""
    return list(_load(_check_language(lang)))


def read_chapter(chapter_id: str, lang: str = "en") -> Chapter:
    """One chapter by number ("3" or "03"), slug, or file stem ("03-<slug>"); "00" (or
    "index") is the index."""
    chapters = list_chapters(lang)
    wanted = str(chapter_id).strip().lower() if not isinstance(chapter_id, bool) else ""
    if wanted.isdigit():
        wanted = wanted.zfill(2)
    for chapter in chapters:
        if wanted in (chapter.id, chapter.slug, f"{chapter.id}-{chapter.slug}"):
            return chapter
    valid = ", ".join(f"{c.id} ({c.slug})" for c in chapters)
    raise KeyError(f"unknown guide chapter {chapter_id!r}; valid chapters: {valid}")


@dataclass(frozen=True)
class Command:
    """A `$ deepinfer-tui ...` line of a console block and the output lines shown under it
    (an excerpt: each is part of one printed line, `...` standing for any text)."""

    line: str
    shown: tuple[str, ...]


@dataclass(frozen=True)
class Snippet:
    """A python block and, when a text block follows it, the output it prints."""

    code: str
    output: str | None


@dataclass(frozen=True)
class Examples:
    commands: tuple[Command, ...]
    snippets: tuple[Snippet, ...]


def _fences(text: str) -> list[tuple[str, str]]:
    """Every fenced (```) block as (info string, body)."""
    blocks: list[tuple[str, str]] = []
    info: str | None = None
    body: list[str] = []
    for line in text.split("\n"):
        if info is None and line.startswith("```"):
            info, body = line[3:].strip(), []
        elif info is not None and line.startswith("```"):
            blocks.append((info, "\n".join(body) + "\n"))
            info = None
        elif info is not None:
            body.append(line)
    return blocks


def _commands(body: str) -> list[Command]:
    commands: list[Command] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            commands.append(Command(line[2:].strip(), ()))
        elif commands and line.strip():
            last = commands[-1]
            commands[-1] = Command(last.line, (*last.shown, line.strip()))
    return commands


def examples(chapter: Chapter) -> Examples:
    """The commands (```console blocks) and library snippets (```python blocks, each with the
    ```text block right after it as its output) that the chapter gives the reader to run."""
    blocks = _fences(chapter.text)
    commands: list[Command] = []
    snippets: list[Snippet] = []
    for index, (info, body) in enumerate(blocks):
        if info == "console":
            commands.extend(_commands(body))
        elif info == "python":
            following = blocks[index + 1] if index + 1 < len(blocks) else ("", "")
            snippets.append(Snippet(body, following[1] if following[0] == "text" else None))
    return Examples(tuple(commands), tuple(snippets))


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def links(chapter: Chapter) -> list[str]:
    """The targets of the chapter's Markdown links, as written."""
    return _LINK.findall(chapter.text)


def linked_chapter(href: str, lang: str) -> Chapter | None:
    """The chapter a link from a chapter in `lang` points at (`02-hot-warm-cold.md`,
    `../zh/02-hot-warm-cold.md`), or None for anything else (a web page, say)."""
    _check_language(lang)
    *folders, name = href.split("#")[0].split("/")
    if folders in ([], ["."]):
        target_lang = lang  # a chapter beside this one
    elif len(folders) == 2 and folders[0] == ".." and folders[1] in LANGUAGES:
        target_lang = folders[1]  # a chapter in the other language's folder
    else:
        return None
    if _FILE_NAME.match(name) is None:
        return None
    try:
        return read_chapter(name.removesuffix(".md"), target_lang)
    except KeyError:
        return None


def _starts_bullet(line: str, label: str) -> bool:
    """`- Label:` (ASCII or full-width colon) begins a labelled bullet."""
    return re.match(rf"- {re.escape(label)}\s*[:：]", line) is not None


def references(chapter: Chapter) -> References:
    """The keys, files and test commands named in the chapter's closing section.

    Each labelled bullet may wrap onto indented continuation lines; every backticked item on
    it is one reference.
    """
    labels = REFERENCE_LABELS[_check_language(chapter.lang)]
    found: dict[str, list[str]] = {label: [] for label in labels}
    current: str | None = None
    for line in chapter.text.splitlines():
        stripped = line.strip()
        label = next((lb for lb in labels if _starts_bullet(stripped, lb)), None)
        if label is not None:
            current = label
        elif current is not None and not (line.startswith((" ", "\t")) and stripped):
            current = None  # the bullet ended: a new bullet, heading or blank line
        if current is not None:
            found[current].extend(_BACKTICKED.findall(line))
    keys, files, commands = (tuple(found[label]) for label in labels)
    return References(keys, files, commands)


# CJK ideographs, kana, CJK and full-width punctuation: text a line may break inside.
_CJK = "\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef"
# A space with CJK on one side; not one beside an emphasis mark, which a space can turn into
# a literal * or _ (CommonMark's flanking rules).
_SPACE_BY_CJK = re.compile(rf"(?<=[{_CJK}]) (?=[^\s*_])|(?<=[^\s*_]) (?=[{_CJK}])")
_LINE_MARKER = re.compile(r"^\s*(?:[-*+]|\d+\.|#+|>)\s+")
_CODE_SPAN = re.compile(r"(`+).*?\1")


def for_terminal(chapter: Chapter) -> str:
    """The chapter's Markdown as the app shows it. A terminal's wrapping breaks lines only at
    spaces, so in Chinese prose the one space before a Latin word would move the whole run of
    ideographs after it to the next line, half-empty lines behind: those spaces go, and the
    run folds at the width instead. Code (fenced, indented or inline), tables and line markers
    keep their spaces."""
    if chapter.lang != "zh":
        return chapter.text
    lines, fence = [], ""
    for line in chapter.text.split("\n"):
        opening = line.lstrip()[:3]
        if fence and opening == fence:
            fence = ""
            lines.append(line)
            continue
        if not fence and opening in ("```", "~~~"):
            fence = opening
        if fence or line.startswith("    ") or line.lstrip().startswith("|"):
            lines.append(line)
            continue
        marker = _LINE_MARKER.match(line)
        head = marker.group(0) if marker else ""
        lines.append(head + _tighten(line[len(head) :]))
    return "\n".join(lines)


def _tighten(text: str) -> str:
    """`text` without the spaces beside CJK; inline code spans are kept whole (each stands in
    as one word while the spaces go)."""
    spans = [match.group(0) for match in _CODE_SPAN.finditer(text)]
    held = _CODE_SPAN.sub("\0", text)  # NUL: not a space, CJK or emphasis mark
    tightened = _SPACE_BY_CJK.sub("", held)
    for span in spans:
        tightened = tightened.replace("\0", span, 1)
    return tightened
