"""The oracles: full recompute for every token, no cache, no drafts, no paging.

`greedy_generate` takes the argmax; `sample_generate` samples with the request's seeded stream
at each absolute position (engine.sampling), so a seeded engine request under `coupled`
acceptance must produce exactly its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import State, TinyModel, is_integer
from .sampling import GREEDY, SamplingParams, check_sampling, choose


@dataclass(frozen=True)
class Generation:
    tokens: tuple[int, ...]
    state: State


def greedy_generate(
    model: TinyModel, prompt: object, max_tokens: int = 8, eos_id: int | None = None
) -> Generation:
    """Greedy decoding by recomputing the whole sequence for each new token."""
    return sample_generate(model, prompt, max_tokens, eos_id, GREEDY)


def sample_generate(
    model: TinyModel,
    prompt: object,
    max_tokens: int = 8,
    eos_id: int | None = None,
    sampling: SamplingParams = GREEDY,
) -> Generation:
    """Sampled decoding by recomputing the whole sequence for each new token: the token at
    absolute position i is chosen from the logits there with the (seed, i) stream. A sampled
    request needs a seed here (the engine draws one at submit; pass that one back)."""
    if not isinstance(model, TinyModel):
        raise ValueError(f"model must be a TinyModel, got {type(model).__name__}")
    sequence = list(model.check_tokens(prompt, "prompt"))
    if not is_integer(max_tokens) or max_tokens < 0:
        raise ValueError(f"max_tokens must be a non-negative integer, got {max_tokens!r}")
    eos_id = model.check_eos_id(
        eos_id
    )  # as Engine.submit checks it: the two must agree on what runs
    sampling = check_sampling(sampling)
    if not sampling.greedy and sampling.seed is None:
        raise ValueError("sampling.seed must be set for the oracle of a sampled request")
    emitted: list[int] = []
    rows = model.full_forward(tuple(sequence))
    for _ in range(int(max_tokens)):
        token = choose(rows.logits[-1], sampling, len(sequence))
        emitted.append(token)
        sequence.append(token)
        rows = model.full_forward(tuple(sequence))
        if token == eos_id:
            break
    return Generation(tuple(emitted), model.state_of(tuple(sequence), rows))
