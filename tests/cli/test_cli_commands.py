"""Each command run in-process: what it prints, its JSON and its exit status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deepinfer_tui.scenario import default_scenario
from engine import TinyModel, greedy_generate

from .helpers import run, run_json


def test_demo_passes_the_oracle_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "demo")
    assert code == 0, err
    assert "tokens equal: yes" in out and "passed" in out
    for kind in ("cold", "hot", "warm"):
        assert f" {kind}: reused" in out
    assert "cancelled" in out


def test_demo_json_tells_the_scenario_stage_by_stage(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "demo", "--trace")
    assert set(data) == {"command", "scenario", "scope", "stages", "check", "metrics"}
    check = data["check"]
    assert check["passed"] and check["tokens_equal"] and check["checked"] == 5
    assert 0 <= check["max_state_error"] <= check["tolerance"] == 1e-10
    restores = [[r["cache"] for r in stage["restores"]] for stage in data["stages"]]
    # Shared prefix (cold then hot), hot reuse, warm recovery, cold miss: as the scenario says.
    assert restores == [["cold", "hot"], ["hot"], ["warm"], ["cold"]]
    results = [r for stage in data["stages"] for r in stage["results"]]
    assert {r["id"]: r["finish_reason"] for r in results}["request-3"] == "cancelled"
    assert sum(stage["speculation"]["rejected"] for stage in data["stages"]) > 0
    assert all(e["text"].startswith(f"t{e['tick']}") for s in data["stages"] for e in s["events"])


def _oracle_tokens(prompt: list[int], max_tokens: int, eos: int | None = None) -> list[int]:
    scenario = default_scenario()
    model = TinyModel(seed=scenario.seed, **scenario.model)
    return list(greedy_generate(model, prompt, max_tokens=max_tokens, eos_id=eos).tokens)


def test_generate_matches_greedy_decoding(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(
        capsys,
        "generate",
        "--prompt",
        "1,2,3",
        "--prompt",
        "4,5,6",
        "--max-tokens",
        "6",
        "--batch-budget",
        "4",
        "--check",
    )
    assert set(data) == {"command", "seed", "config", "models", "results", "metrics", "check"}
    assert data["config"]["max_batch_tokens"] == 4
    assert [r["id"] for r in data["results"]] == ["request-1", "request-2"]
    for result in data["results"]:
        assert set(result) == {
            "id",
            "prompt",
            "tokens",
            "finish_reason",
            "error",
            "accepted",
            "proposed",
        }
        assert result["tokens"] == _oracle_tokens(result["prompt"], 6)
        assert result["finish_reason"] == "length"
    assert data["check"]["passed"]


def test_generate_without_fast_paths_commits_the_same_tokens(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ("generate", "--prompt", "1,2,3", "--prompt", "1,2,3,4,5", "--max-tokens", "7")
    fast = run_json(capsys, *args)
    plain = run_json(capsys, *args, "--no-fast-paths", "--check")
    assert (fast["config"]["fast_paths"], plain["config"]["fast_paths"]) == (True, False)
    assert [r["tokens"] for r in plain["results"]] == [r["tokens"] for r in fast["results"]]
    assert plain["check"]["passed"]


def test_generate_text_greedy_with_trace(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "generate", "--prompt", "1 2 3 4", "--greedy", "--trace")
    assert code == 0
    tokens = _oracle_tokens([1, 2, 3, 4], 8)
    assert "[" + " ".join(map(str, tokens)) + "]" in out
    assert "t1 request-1 restore cold" in out and "greedy, no draft model" in out


def test_generate_from_an_input_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    eos = _oracle_tokens([7, 8, 9], 4)[1]  # stop at the second token the oracle produces
    requests = [
        {"prompt": [7, 8, 9], "max_tokens": 4, "eos_id": eos, "id": "mine"},
        {"prompt": [1, 2], "max_tokens": 2},
    ]
    path = tmp_path / "requests.json"
    path.write_text(json.dumps(requests), encoding="utf-8")
    data = run_json(capsys, "generate", "--input", str(path), "--check", "--trace")
    by_id = {r["id"]: r for r in data["results"]}
    assert by_id["mine"]["finish_reason"] == "stop"
    assert by_id["mine"]["tokens"] == _oracle_tokens([7, 8, 9], 4, eos)
    assert by_id["request-2"]["tokens"] == _oracle_tokens([1, 2], 2)
    assert data["check"]["passed"] and data["events"][0]["kind"] == "queued"


def test_generate_checks_the_pool_against_its_own_requests_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The built-in scenario's requests need more blocks than this pool has; generate runs
    # only the prompt given here, which fits in one block.
    scenario = default_scenario()
    block_size = scenario.config["block_size"]
    largest = max(
        len(e.submit["prompt"]) + e.submit["max_tokens"] for e in scenario.events if e.submit
    )
    assert largest > block_size
    data = run_json(
        capsys,
        "generate",
        "--prompt",
        "1",
        "--max-tokens",
        str(block_size - 1),
        "--num-blocks",
        "1",
    )
    assert data["results"][0]["tokens"] == _oracle_tokens([1], block_size - 1)


def test_bounded_recovery_fails_the_oracle_check(capsys: pytest.CaptureFixture[str]) -> None:
    # A prompt far longer than keep (8): with one new token, the last row still depends on
    # local context that mask recovery hides, so the state differs from the full recompute.
    prompt = ",".join(str(t) for t in range(3, 27))
    code, out, _ = run(
        capsys,
        "generate",
        "--prompt",
        prompt,
        "--recovery-mode",
        "mask",
        "--check",
        "--max-tokens",
        "1",
        "--json",
    )
    check = json.loads(out)["check"]
    assert code == 1 and not check["passed"]


def test_bounded_experiment_compares_modes(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "bounded", "--length", "32", "--keep", "8")
    depth = default_scenario().model["depth"]
    assert data["consumer_rows"] == {"exact": 32 * depth, "mask": 32 * depth, "compact": 8 * depth}
    assert data["kept_from"] == 24 and len(data["tokens"]) == 32
    assert data["mask_compact_agree"] and data["mask_vs_compact_max_error"] <= 1e-10
    # An approximation: on this sequence the bounded rows really differ from exact ones.
    assert data["bounded_vs_exact_max_error"]["mask"] > 1e-6
    assert set(data["next_token"]) == {"exact", "mask", "compact"}
    assert "approximation" in data["note"]
    code, out, _ = run(capsys, "bounded")
    assert code == 0 and "approximations" in out


def test_export_then_replay_round_trip(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = run_json(capsys, "export", "--steps", "3", "--out", str(tmp_path / "out"))
    assert data["tick"] == 3 and data["scenario"] == "default"
    names = sorted(Path(f).name for f in data["files"])
    assert names == sorted(
        f"default-t0003.{s}" for s in ("svg", "html", "txt", "trace.json", "perfetto.json")
    )
    trace = next(f for f in data["files"] if f.endswith(".trace.json"))
    code, out, _ = run(capsys, "replay", trace, "--check")
    assert code == 0 and "reproduced every recorded event" in out
    report = run_json(capsys, "replay", trace)
    assert report == {
        "command": "replay",
        "trace": trace,
        "scenario": "default",
        "operations": 3,
        "events": report["events"],
        "frames": 4,
        "reproduced": True,
        "divergence": None,
    }
    # Tampering with what was recorded is caught, named, and exits 1.
    saved = json.loads(Path(trace).read_text(encoding="utf-8"))
    commit = next(e for e in saved["events"] if e["kind"] == "commit")
    commit["tokens"] = [0, 0]
    Path(trace).write_text(json.dumps(saved), encoding="utf-8")
    code, out, _ = run(capsys, "replay", trace)
    assert code == 1 and "DIVERGED: event" in out and "[0 0]" in out


def test_export_with_settings_and_formats(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(
        capsys,
        "export",
        "--out",
        str(tmp_path),
        "--format",
        "txt,json",
        "--greedy",
        "--batch-budget",
        "2",
        "--undo-depth",
        "3",
    )
    assert code == 0 and "default-t" in out
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json", ".txt"]
    trace = json.loads(next(tmp_path.glob("*.trace.json")).read_text(encoding="utf-8"))
    assert trace["config"]["max_batch_tokens"] == 2 and trace["scenario"]["draft"] is None
    assert trace["config"]["undo_depth"] == 3


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_guide_without_a_chapter_prints_the_index(
    capsys: pytest.CaptureFixture[str], lang: str
) -> None:
    code, out, _ = run(capsys, "guide", "--lang", lang)
    index = run_json(capsys, "guide", "00", "--lang", lang)
    assert code == 0 and out.startswith("# ") and out == index["text"]
    for chapter in run_json(capsys, "guide", "--list", "--lang", lang)["chapters"][1:]:
        assert chapter["slug"] in out  # the index links every chapter


def test_guide_lists_and_prints_chapters(capsys: pytest.CaptureFixture[str]) -> None:
    listing = run_json(capsys, "guide", "--list")
    chapters = listing["chapters"]
    assert listing["lang"] == "en" and chapters and chapters[0]["id"] == "00"
    assert set(chapters[0]) == {"id", "slug", "title"}
    chapter = run_json(capsys, "guide", chapters[0]["id"], "--lang", "zh")
    assert set(chapter) == {"command", "id", "slug", "title", "lang", "text"}
    assert chapter["lang"] == "zh" and chapter["text"].startswith("# ")
    code, out, _ = run(capsys, "guide", chapters[0]["id"])
    assert code == 0 and out.startswith(f"# {chapters[0]['title']}")
    code, out, _ = run(capsys, "guide", "--list", "--lang", "zh")
    assert code == 0 and chapters[0]["id"] in out


@pytest.mark.parametrize(
    ("file_name", "data"),
    [
        ("s.json", {"name": "n" * 200}),
        ("s.json", {"name": "\u00e9" * 200}),  # each byte-long in no file system's name
        ("x" * 230 + ".json", {}),  # the name is the file's
    ],
)
def test_a_long_scenario_name_still_exports(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, file_name: str, data: dict[str, Any]
) -> None:
    path = tmp_path / file_name
    path.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "out"
    exported = run_json(
        capsys, "export", "--scenario", str(path), "--steps", "1", "--out", str(out)
    )
    files = [Path(name) for name in exported["files"]]
    assert len(files) == 5 and all(f.is_file() and len(f.name) <= 100 for f in files)
    again = run_json(capsys, "export", "--scenario", str(path), "--steps", "1", "--out", str(out))
    # The same name gives the same stem: the second export is numbered after the first.
    stem = files[0].name.split(".")[0]
    assert Path(again["files"][0]).name.startswith(f"{stem}-2.")
