"""Number formatting for verdict sentences: every reason is one sentence with the numbers."""

from __future__ import annotations


def signed(value: float, digits: int = 1) -> str:
    text = f"{abs(value):.{digits}f}"
    return f"−{text}" if value < 0 and float(text) != 0 else f"+{text}"


def pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def points_ci(interval: tuple[float, float], confidence: float) -> str:
    return f"{confidence:.0%} CI {signed(interval[0] * 100)} to {signed(interval[1] * 100)}"


def rel_ci(interval: tuple[float, float], confidence: float) -> str:
    return f"{confidence:.0%} CI {signed(interval[0] * 100)}% to {signed(interval[1] * 100)}%"


def amount(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:.0f} ms" if value >= 100 else f"{value:.1f} ms"
    if unit == "%":
        return pct(value)
    if abs(value) >= 100:
        return f"{value:,.0f}{unit}"  # 1,000 tok/s, never 1e+03
    return f"{value:.3g}{unit}"


def moved(delta: float) -> str:
    if delta == 0:
        return "held"
    return "rose" if delta > 0 else "fell"


def size(fraction: float, unit_word: str) -> str:
    """0.05 → "5-point" (rates), "5%" (relative), "0.05" (scores)."""
    if unit_word == "point":
        return f"{fraction * 100:.3g}-point"
    if unit_word == "percent":
        return f"{fraction * 100:.3g}%"  # a margin widened to a slack reads 174%, not 174.034%
    return f"{fraction:g}"
