"""`guide`: the walkthrough chapters, offline."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from ..describe import error_message
from .common import print_json
from .exits import PROG, UsageError
from .options import add_command, add_json_option

SUMMARY = "read the walkthrough chapters offline (English or Chinese)"
DETAILS = "Prints a chapter's Markdown (without CHAPTER: the index), or the list of chapters."


def add_parser(commands: Any) -> None:
    parser = add_command(commands, "guide", SUMMARY, DETAILS, run)
    parser.add_argument(
        "chapter",
        nargs="?",
        metavar="CHAPTER",
        help="chapter number, e.g. 03 (default: 00, the index)",
    )
    parser.add_argument("--list", action="store_true", help="list the chapters")
    parser.add_argument("--lang", default="en", metavar="LANG", help="en (default) or zh")
    add_json_option(parser)


def run(args: argparse.Namespace) -> int:
    try:
        from .. import guide
    except ImportError:
        print(f"{PROG} guide: the walkthrough chapters are not part of this build", file=sys.stderr)
        return 1
    if args.list:
        chapters = guide.list_chapters(args.lang)
        if args.json:
            print_json(
                {
                    "command": "guide",
                    "lang": args.lang,
                    "chapters": [{"id": c.id, "slug": c.slug, "title": c.title} for c in chapters],
                }
            )
        else:
            for chapter in chapters:
                print(f"{chapter.id}  {chapter.title}")
            first = chapters[0].id if chapters else "01"
            print(f"\nRead one with: {PROG} guide {first} --lang {args.lang}")
        return 0
    try:  # no chapter: the index, which orients a reader and names every chapter
        chapter = guide.read_chapter(args.chapter or "00", args.lang)
    except (KeyError, ValueError) as error:
        raise UsageError(f"{PROG} guide: {error_message(error)}") from None
    if args.json:
        print_json({"command": "guide", **dataclasses.asdict(chapter)})
    else:
        print(chapter.text, end="" if chapter.text.endswith("\n") else "\n")
    return 0
