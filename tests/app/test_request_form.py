"""The add-request form's reading of its fields (Textual-free): what each field takes, the
refusal in the form's words, and the field a refusal sends the cursor back to. The screen's
keys are tested in test_app_sampling_form.py."""

from __future__ import annotations

import pytest

from deepinfer_tui.request_form import (
    DEFAULT_MAX_TOKENS,
    NewRequest,
    counted_from_one,
    read_request,
    refused_field,
)
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session

VOCAB = 32


def test_empty_fields_take_their_defaults_and_greedy_decoding() -> None:
    assert read_request({"prompt": "4, 5", "max-tokens": " "}, VOCAB) == NewRequest(
        prompt=[4, 5], max_tokens=DEFAULT_MAX_TOKENS, eos_id=None, priority=0, sampling=None
    )


def test_every_field_given() -> None:
    fields = {
        "prompt": "7 8 9",
        "max-tokens": "3",
        "eos": "2",
        "temperature": "0.8",
        "top-k": "20",
        "top-p": "0.9",
        "seed": "123",
        "priority": "-1",
    }
    assert read_request(fields, VOCAB) == NewRequest(
        [7, 8, 9], 3, 2, -1, {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 123}
    )


@pytest.mark.parametrize(
    ("typed", "problem", "field"),
    [
        ({"prompt": ""}, "prompt: needs at least one token id", "prompt"),
        ({"prompt": "1,x"}, "prompt: token 2 must be a whole number, got 'x'", "prompt"),
        ({"max-tokens": "-1"}, "max new tokens must be", "max-tokens"),
        ({"eos": "40"}, "the EOS token id must be in [0, 32), got 40", "eos"),
        (
            {"temperature": "-1"},
            "temperature must be a finite number >= 0, got -1.0",
            "temperature",
        ),
        ({"temperature": "hot"}, "temperature must be a number, got 'hot'", "temperature"),
        (
            {"temperature": "1e999"},
            "temperature must be a finite number, got '1e999'",
            "temperature",
        ),
        ({"temperature": "٣"}, "temperature must be a number", "temperature"),  # not an ASCII digit
        (
            {"temperature": "1", "top-k": "-2"},
            "top_k must be a non-negative integer, got -2",
            "top-k",
        ),
        ({"temperature": "1", "top-k": "1.5"}, "top_k must be a whole number, got '1.5'", "top-k"),
        ({"temperature": "1", "top-p": "0"}, "top_p must be a number in (0, 1], got 0.0", "top-p"),
        (
            {"temperature": "1", "top-p": "1.5"},
            "top_p must be a number in (0, 1], got 1.5",
            "top-p",
        ),
        (
            {"temperature": "1", "seed": "-1"},
            "seed must be None or an integer in [0, 2**64)",
            "seed",
        ),
        ({"temperature": "1", "seed": "x"}, "seed must be a whole number, got 'x'", "seed"),
        ({"priority": "high"}, "priority must be a whole number, got 'high'", "priority"),
    ],
)
def test_a_bad_field_is_refused_in_the_forms_words_naming_the_field(
    typed: dict[str, str], problem: str, field: str
) -> None:
    with pytest.raises(ValueError) as refusal:
        read_request({"prompt": "1,2,3", **typed}, VOCAB)
    message = str(refusal.value)
    assert problem in message, message
    assert refused_field(message) == field  # SamplingParams' top_k is the form's top-k


def test_the_engines_refusals_name_their_field_or_none() -> None:
    session = Session(default_scenario())
    refusals = {}
    for name, prompt, max_tokens, eos in [
        ("prompt", [1, 99], 8, None),
        ("eos", [1], 8, 77),
        (None, [1] * 500, 8, None),  # the pool is too small for the request as a whole
    ]:
        with pytest.raises(ValueError) as refusal:
            session.submit(prompt, max_tokens, eos, 0, None)
        refusals[name] = str(refusal.value)
    for name, message in refusals.items():
        assert refused_field(message) == name, message
    assert counted_from_one(refusals["prompt"]).startswith("token 2 = 99 is outside")
