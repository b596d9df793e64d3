"""Chi-square goodness of fit without SciPy: the statistic, and its survival function through
the regularized upper incomplete gamma function (a series below a + 1, a continued fraction
above, both to full double precision)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

ALPHA = 0.001  # the tests' level: a fixed set of seeds makes every test deterministic
MIN_EXPECTED = 5.0  # cells expected less often than this are pooled into one


def _lower_series(a: float, x: float) -> float:
    """P(a, x) by its power series (converges fast for x < a + 1)."""
    term = total = 1.0 / a
    n = a
    while abs(term) > abs(total) * 1e-16:
        n += 1.0
        term *= x / n
        total += term
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _upper_fraction(a: float, x: float) -> float:
    """Q(a, x) by its continued fraction, evaluated with the modified Lentz method."""
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-16:
            break
    return h * math.exp(-x + a * math.log(x) - math.lgamma(a))


def chi2_sf(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X ~ chi-square with `dof` degrees of freedom."""
    a, x = dof / 2.0, statistic / 2.0
    if x <= 0:
        return 1.0
    if x < a + 1.0:
        return 1.0 - _lower_series(a, x)
    return _upper_fraction(a, x)


def chi_square(counts: Mapping[object, int], expected: Mapping[object, float]) -> tuple[float, int]:
    """(statistic, degrees of freedom) of observed `counts` against `expected` probabilities
    (summing to 1); rare cells are pooled. Observations outside the support fail at once."""
    total = sum(counts.values())
    outside = {cell: n for cell, n in counts.items() if expected.get(cell, 0.0) <= 0.0}
    assert not outside, f"drawn where the distribution has no mass: {outside}"
    cells: list[tuple[float, int]] = []
    pooled_expected, pooled_count = 0.0, 0
    for cell, probability in expected.items():
        want = probability * total
        if want < MIN_EXPECTED:
            pooled_expected += want
            pooled_count += counts.get(cell, 0)
        else:
            cells.append((want, counts.get(cell, 0)))
    if pooled_expected > 0:
        cells.append((pooled_expected, pooled_count))
    statistic = sum((seen - want) ** 2 / want for want, seen in cells)
    return statistic, len(cells) - 1


def assert_fits(counts: Mapping[object, int], expected: Mapping[object, float], what: str) -> None:
    statistic, dof = chi_square(counts, expected)
    assert dof >= 1, f"{what}: too few cells to test"
    p_value = chi2_sf(statistic, dof)
    assert p_value > ALPHA, f"{what}: chi-square {statistic:.1f} on {dof} dof, p = {p_value:.2e}"


def tally(rows: Sequence[Sequence[int]] | Sequence[int]) -> dict[object, int]:
    counts: dict[object, int] = {}
    for row in rows:
        key = tuple(int(v) for v in row) if isinstance(row, (list, tuple)) else int(row)
        counts[key] = counts.get(key, 0) + 1
    return counts
