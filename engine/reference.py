"""The greedy oracle: full recompute for every token, no cache, no drafts, no paging."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import State, TinyModel, is_integer


@dataclass(frozen=True)
class Generation:
    tokens: tuple[int, ...]
    state: State


def greedy_generate(
    model: TinyModel, prompt: object, max_tokens: int = 8, eos_id: int | None = None
) -> Generation:
    """Greedy decoding by recomputing the whole sequence for each new token."""
    if not isinstance(model, TinyModel):
        raise ValueError(f"model must be a TinyModel, got {type(model).__name__}")
    sequence = list(model.check_tokens(prompt, "prompt"))
    if not is_integer(max_tokens) or max_tokens < 0:
        raise ValueError(f"max_tokens must be a non-negative integer, got {max_tokens!r}")
    eos_id = model.check_eos_id(
        eos_id
    )  # as Engine.submit checks it: the two must agree on what runs
    emitted: list[int] = []
    rows = model.full_forward(tuple(sequence))
    for _ in range(int(max_tokens)):
        token = int(np.argmax(rows.logits[-1]))
        emitted.append(token)
        sequence.append(token)
        rows = model.full_forward(tuple(sequence))
        if token == eos_id:
            break
    return Generation(tuple(emitted), model.state_of(tuple(sequence), rows))
