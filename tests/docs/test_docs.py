"""Every command and example in the README and the reference documents runs as written (a slow
command in a fast form of itself) and does what the document says it does."""

from __future__ import annotations

import dataclasses
import json
import os
import pty
import re
import select
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REFERENCE_DOCUMENTS = ("docs/scenarios.md", "docs/library.md", "benchmarks/README.md")
DOCUMENTS = ("README.md", *REFERENCE_DOCUMENTS)  # the README's commands: test_readme.py
# Linked from the README and written in their own branches; the link test waits for them.
PENDING_LINKS = {"docs/cli.md", "docs/architecture.md"}
TIMEOUT = 300  # seconds for one command: generous, the machine may be loaded


def read(document: str) -> str:
    return (REPO / document).read_text(encoding="utf-8")


def fenced(document: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", read(document), re.S)


def section(document: str, title: str) -> str:
    text = read(document)
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def documented_commands(document: str) -> list[str]:
    """Each line of the document's shell blocks, without its trailing comment."""
    lines = (line for block in fenced(document, "sh") for line in block.splitlines())
    return [re.sub(r"\s+#\s.*$", "", line).strip() for line in lines if line.strip()]


@dataclass(frozen=True)
class Output:
    status: int
    out: str
    err: str
    folder: Path  # where the command ran (a fresh folder, or the repository)
    scratch: Path  # a fresh folder for files the fast form writes


@dataclass(frozen=True)
class Ran:
    """A command the test runs: `fast` replaces `{scratch}` and is added to the command (or
    `runs` replaces it); in a terminal when `keys` is set, pressed once `shows` is on screen."""

    check: Callable[[Output], None]
    fast: tuple[str, ...] = ()
    runs: str | None = None
    in_repo: bool = False
    keys: bytes | None = None
    shows: str = ""
    status: int = 0


@dataclass(frozen=True)
class NotRun:
    """A command that installs or runs for minutes: the test holds its exact text only."""

    why: str


def argv_of(command: str, scratch: Path, fast: tuple[str, ...]) -> list[str]:
    """The command as this checkout runs it: `deepinfer-tui` is `python -m deepinfer_tui`."""
    words = shlex.split(command) + [word.replace("{scratch}", str(scratch)) for word in fast]
    if words[0] == "deepinfer-tui":
        return [sys.executable, "-m", "deepinfer_tui", *words[1:]]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    return words


def environment() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "TERM": "xterm-256color"}


def run_in_terminal(argv: list[str], cwd: Path, keys: bytes, shows: str) -> tuple[int, str]:
    """Run `argv` in an 80x24 pseudo-terminal, press `keys` once `shows` is on screen."""
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    process = subprocess.Popen(
        argv, cwd=cwd, env=environment(), stdin=follower, stdout=follower, stderr=follower
    )
    os.close(follower)
    screen, deadline = b"", time.monotonic() + TIMEOUT
    pressed_at = -5.0  # the first press as soon as the screen shows `shows`
    try:
        while process.poll() is None and time.monotonic() < deadline:
            if select.select([leader], [], [], 0.2)[0]:
                try:
                    screen += os.read(leader, 65536)
                except OSError:  # the terminal closed: the program has ended
                    break
            if shows.encode() in screen and time.monotonic() > pressed_at + 5:
                time.sleep(0.5)  # let the frame finish drawing
                os.write(leader, keys)  # again every 5 s, should a press come too early
                pressed_at = time.monotonic()
        status = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)
    return status, screen.decode("utf-8", "replace")


def run(command: str, spec: Ran, folder: Path, scratch: Path) -> Output:
    text = spec.runs or command
    cwd = REPO if spec.in_repo else folder
    if spec.keys is not None:
        argv = argv_of(text, scratch, spec.fast)
        status, screen = run_in_terminal(argv, cwd, spec.keys, spec.shows)
        return Output(status, screen, "", cwd, scratch)
    steps = [argv_of(part, scratch, spec.fast) for part in text.split(" && ")]
    status, out, err = 0, "", ""
    for argv in steps:  # `a && b`: b runs only when a succeeded
        done = subprocess.run(
            argv, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=TIMEOUT
        )
        status, out, err = done.returncode, out + done.stdout, err + done.stderr
        if status:
            break
    return Output(status, out, err, cwd, scratch)


# -- what each documented command must do -------------------------------------------------------


def replay_reproduced(o: Output) -> None:
    assert "reproduced every recorded event" in o.out


def quick_harness_ran(o: Output) -> None:
    result = json.loads((o.scratch / "quick.json").read_text())
    assert result["quick"] is True
    assert set(result["workloads"]) == {"batch", "batch-greedy", "long", "tui"}
    assert all(t["status"] in ("PASS", "FAIL", "n/a") for t in result["targets"])
    documented = set(re.findall(r"`([a-z_]+)`", section("benchmarks/README.md", "JSON")))
    named = set(result) | {k for w in result["workloads"].values() for k in w}
    assert named <= documented, f"not in benchmarks/README.md: {sorted(named - documented)}"
    assert "targets (reported, not asserted" in o.out


def tui_workload_ran(o: Output) -> None:
    result = json.loads((o.scratch / "tui.json").read_text())
    assert list(result["workloads"]) == ["tui"]
    assert result["workloads"]["tui"]["ours"]["presses"] == 10
    assert "keypress to settled frame" in o.out


def profile_saved(title: str) -> Callable[[Output], None]:
    def check(o: Output) -> None:
        assert (o.scratch / "run.prof").stat().st_size > 0
        assert f"== {title}: top" in o.out and "profile saved to" in o.out

    return check


def two_users_exported(o: Output) -> None:
    exports = o.folder / "deepinfer-exports"
    assert sorted(p.name for p in exports.iterdir()) == [
        "two-users-t0006.trace.json",
        "two-users-t0006.txt",
    ]
    trace = json.loads((exports / "two-users-t0006.trace.json").read_text())
    finished = {
        e["request_id"]: e["finish_reason"] for e in trace["events"] if e["kind"] == "finished"
    }
    assert finished == {"a": "cancelled", "request-2": "length", "request-3": "length"}
    assert "shown under the title" in (exports / "two-users-t0006.txt").read_text()


def scenario_generate_checked(o: Output) -> None:
    assert "request-1" in o.out and "→ passed" in o.out


def two_users_on_screen(o: Output) -> None:
    assert "two-users" in o.out and "request-2" in o.out and "rollback" in o.out


COMMANDS: dict[str, Ran | NotRun] = {
    # docs/scenarios.md (its JSON example is saved as two-users.json first)
    "deepinfer-tui --scenario two-users.json": Ran(two_users_on_screen, keys=b"q", shows="quit"),
    "deepinfer-tui export --scenario two-users.json --format json,txt": Ran(two_users_exported),
    "deepinfer-tui replay deepinfer-exports/two-users-t0006.trace.json --check": Ran(
        replay_reproduced
    ),
    "deepinfer-tui generate --scenario two-users.json --prompt 1,2,3 --check": Ran(
        scenario_generate_checked
    ),
    # benchmarks/README.md
    "python benchmarks/run.py --quick": Ran(
        quick_harness_ran, fast=("--no-reference", "--json", "{scratch}/quick.json"), in_repo=True
    ),
    "python -m pip install -e .": NotRun("installs"),
    "python -m pip install core-deepinfer": NotRun("installs"),
    "python -m pip install threadpoolctl": NotRun("installs"),
    "python benchmarks/run.py --repeat 3": NotRun("the full harness: minutes"),
    "python benchmarks/run.py --workload tui --quick": Ran(
        tui_workload_ran,
        fast=("--no-reference", "--no-memory", "--json", "{scratch}/tui.json"),
        in_repo=True,
    ),
    "python benchmarks/profile_workload.py batch --quick": Ran(
        profile_saved("batch"), fast=("--out", "{scratch}/run.prof"), in_repo=True
    ),
    "python benchmarks/profile_workload.py long --context 2048 --mode speculative --phase decode": (
        Ran(
            profile_saved("long-2048-speculative-decode"),
            fast=("--out", "{scratch}/run.prof"),
            in_repo=True,
        )
    ),
}


def check_commands_are_covered(
    documents: tuple[str, ...], commands: dict[str, Ran | NotRun]
) -> None:
    documented = {c for document in documents for c in documented_commands(document)}
    assert documented == set(commands), (
        f"documented but not checked: {sorted(documented - set(commands))}; "
        f"checked but no longer documented: {sorted(set(commands) - documented)}"
    )


# A command run in the repository reads nothing that an earlier command of its document wrote:
# it runs beside the others (CI has 2 cores), and one that the README and a reference document
# both show runs once and is checked for each.
IN_REPO_RUNNER = ThreadPoolExecutor(max_workers=2)
RAN_IN_REPO: dict[tuple[str, Ran], Future[Output]] = {}


def start_in_repo(command: str, spec: Ran, folder: Path, scratch: Path) -> Future[Output]:
    if (command, spec) not in RAN_IN_REPO:
        RAN_IN_REPO[command, spec] = IN_REPO_RUNNER.submit(run, command, spec, folder, scratch)
    return RAN_IN_REPO[command, spec]


def run_documented_commands(
    document: str, commands: dict[str, Ran | NotRun], tmp_path: Path
) -> None:
    """The document's commands in order, in one fresh folder (a later one may read what an
    earlier one wrote), each in its fast form, with its exit status and its output checked
    (in the document's order, once all have run)."""
    folder = tmp_path / "work"
    folder.mkdir()
    if document == "docs/scenarios.md":  # "Save it as two-users.json"
        (folder / "two-users.json").write_text(fenced(document, "json")[0], encoding="utf-8")
    outputs: list[tuple[str, Ran, Callable[[], Output]]] = []
    for index, command in enumerate(documented_commands(document)):
        spec = commands[command]
        if isinstance(spec, NotRun):
            continue
        if command.startswith("ruff") and shutil.which("ruff") is None:
            continue  # ruff is a development tool, not in the test extra
        scratch = tmp_path / f"scratch-{index}"
        scratch.mkdir()
        if spec.in_repo and spec.keys is None:
            outputs.append((command, spec, start_in_repo(command, spec, folder, scratch).result))
        else:
            output = run(command, spec, folder, scratch)
            outputs.append((command, spec, lambda output=output: output))
    for command, spec, result in outputs:
        output = result()
        assert output.status == spec.status, f"{command}: exit {output.status}\n{output.err}"
        spec.check(output)


def test_every_documented_command_has_a_check() -> None:
    check_commands_are_covered(REFERENCE_DOCUMENTS, COMMANDS)


@pytest.mark.parametrize("document", REFERENCE_DOCUMENTS)
def test_documented_commands_run(document: str, tmp_path: Path) -> None:
    run_documented_commands(document, COMMANDS, tmp_path)


def check_held_commands(commands: dict[str, Ran | NotRun]) -> None:
    """A command held for its text still names what exists: the extras it installs, the
    options it passes to a script of this repository (read from the script's --help)."""
    pyproject = read("pyproject.toml")  # (tomllib is not in Python 3.10)
    for command, spec in commands.items():
        if not isinstance(spec, NotRun):
            continue
        for extra in re.findall(r"'\.\[(\w+)\]'", command):
            assert re.search(rf"^{extra} = \[", pyproject, re.M), f"{command}: no extra {extra}"
        words = shlex.split(command)
        if words[0] == "python" and (REPO / words[1]).is_file():
            usage = subprocess.run(
                [sys.executable, words[1], "--help"], cwd=REPO, capture_output=True, text=True
            ).stdout
            for option in (word for word in words if word.startswith("--")):
                assert option in usage, f"{command}: {words[1]} has no {option}"


def test_held_commands_name_what_exists() -> None:
    check_held_commands(COMMANDS)


# -- the library document ------------------------------------------------------------------------


def run_python_blocks(document: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Execute each python block on its own; return what each printed."""
    printed = []
    for block in fenced(document, "python"):
        exec(compile(block, document, "exec"), {})
        printed.append(capsys.readouterr().out)
    return printed


def test_library_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = run_python_blocks("docs/library.md", capsys)
    imports, first, rounds, edges, sampling, ngram, order, warm_up = blocks
    assert imports == ""
    assert re.fullmatch(r"request-1 \((\d+, ){3}\d+\) length\n", first)
    cold, drafted = rounds.splitlines()
    assert cold.startswith("['restore'") and "'draft'" not in cold
    assert "'draft'" in drafted and "'verify'" in drafted
    refusal, states = edges.splitlines()
    assert "prompt[1]" in refusal and "vocabulary" in refusal
    assert states == "['warm']"
    seed, rejection = sampling.splitlines()  # a drawn seed, then six sampled tokens
    assert seed.isdigit() and re.fullmatch(r"\((\d+, ){5}\d+\)", rejection)
    assert ngram == "[7, 8, 1]\n"
    # run() pairs with the prompts: submission order, though the second finishes first.
    assert [line.split()[-2] for line in order.splitlines()] == [
        "request-1",
        "request-2",
        "request-3",
    ]
    assert warm_up == "() length 4\nhot 4\n"  # the zero-token warm-up is reused whole


def test_library_import_list_is_the_public_surface() -> None:
    import engine

    (block,) = [b for b in fenced("docs/library.md", "python") if "from engine import (" in b]
    listed = re.findall(r"^\s+(\w+),$", block, re.M)
    assert sorted(listed) == sorted(engine.__all__)


def test_library_config_table_is_engine_config() -> None:
    from engine import EngineConfig

    rows = re.findall(
        r"^\| `(\w+)` \| ([^|]+) \|", section("docs/library.md", "EngineConfig"), re.M
    )
    documented = {name: default.strip() for name, default in rows}
    defaults = {f.name: f.default for f in dataclasses.fields(EngineConfig)}
    assert list(documented) == list(defaults)  # every field, in the dataclass's order
    assert documented == {name: str(value) for name, value in defaults.items()}


def test_library_states_what_a_vllm_user_expects() -> None:
    text = section("docs/library.md", "What a vLLM or core-deepinfer user expects")
    for rule in (
        "in the order the requests were submitted",
        "generate(prompt, max_tokens=0)",
        'finish_reason == "error"',
        "`kv_cache_memory_mib` (default 32 MiB)",
    ):
        assert rule in text, rule
    # The figures quoted for the default pool are the engine's own.
    from engine import EngineConfig, TinyModel, pool_blocks

    blocks = pool_blocks(EngineConfig(), TinyModel())
    assert f"{blocks:,} blocks of 16, that is\n{blocks * 16:,} positions" in text


# -- the scenario document -----------------------------------------------------------------------


def test_scenario_example_loads_and_runs() -> None:
    from deepinfer_tui.scenario import parse_scenario
    from deepinfer_tui.session import Session

    (block,) = fenced("docs/scenarios.md", "json")
    session = Session(parse_scenario(json.loads(block), "docs/scenarios.md"))
    session.run()
    finished = {r["id"]: r["finish_reason"] for r in session.snapshot()["requests"]}
    assert finished == {"a": "cancelled", "request-2": "length", "request-3": "length"}
    restores = {e["request_id"]: e["cache"] for e in session.log() if e["kind"] == "restore"}
    assert restores["request-3"] == "warm"  # the clock moved past the hot cursor's lifetime
    assert session.clock.now == 5.0


def test_scenario_errors_are_the_messages_shown() -> None:
    """Each message the Errors section quotes is what one edit of the example gives."""
    from deepinfer_tui.scenario import ScenarioError, parse_scenario

    (block,) = fenced("docs/scenarios.md", "json")
    bad_cancel, bad_block, bad_field = json.loads(block), json.loads(block), json.loads(block)
    bad_cancel["events"][2]["cancel"] = "b"
    bad_block["config"]["block_size"] = 0
    bad_field["seeds"] = 1
    quoted = re.findall(r"^- `(.+)`$", section("docs/scenarios.md", "Errors"), re.M)
    messages = []
    for edited in (bad_cancel, bad_block, bad_field):
        with pytest.raises(ScenarioError) as refused:
            parse_scenario(edited, "two-users.json")
        messages.append(str(refused.value))
    assert messages == quoted


def test_scenario_fields_table_names_every_field() -> None:
    from deepinfer_tui.scenario import default_scenario

    fields = set(default_scenario().to_dict())
    rows = set(re.findall(r"^\| `(\w+)` \|", section("docs/scenarios.md", "Fields"), re.M))
    assert rows == fields


# -- links ---------------------------------------------------------------------------------------


def test_relative_links_resolve() -> None:
    missing = set()
    for document in DOCUMENTS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", read(document)):
            if "://" in target:
                continue
            path = ((REPO / document).parent / target).resolve()
            if not path.exists():
                missing.add(str(path.relative_to(REPO)))
    assert missing <= PENDING_LINKS, f"broken links: {sorted(missing - PENDING_LINKS)}"
    if missing:
        pytest.skip(f"written in other branches, not here yet: {sorted(missing)}")
