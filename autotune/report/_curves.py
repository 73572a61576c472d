"""The numerics check's evidence on the page: each attempt's candidate and reference loss curves as
a small inline SVG (no plotting library, no file beside the page: a few polylines)."""

from __future__ import annotations

from autotune.report._data import Attempt, Evidence
from autotune.report._escape import escape

WIDTH, HEIGHT, PAD = 360, 180, 28
COLOURS = {"candidate": "#d62728", "reference": "#1f77b4"}


def loss_svg(evidence: Evidence) -> str:
    """One SVG a check attempt: loss against step, the candidate red, the reference blue."""
    figures = [_attempt(a, evidence.get("against")) for a in evidence["attempts"]]
    return '<div class="curves">' + "".join(figures) + "</div>"


def _attempt(a: Attempt, against: str | None) -> str:
    series = {"candidate": a["candidate"], "reference": a["reference"]}
    lo = min(min(v) for v in series.values())
    hi = max(max(v) for v in series.values())
    steps = max(len(v) for v in series.values())
    lines = [_polyline(values, lo, hi, steps, COLOURS[name]) for name, values in series.items()]
    gap = "" if a.get("gap_nats") is None else f", gap {a['gap_nats']:+.3f} nats"
    title = (
        f"seed {a.get('seed')}: candidate (red) against {against or 'the reference'} (blue){gap}"
    )
    return (
        f'<svg role="img" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">'
        f"<title>{escape(title)}</title>"
        f'<text x="{PAD}" y="14" font-size="11">{escape(title)}</text>'
        f'<text x="2" y="{PAD + 4}" font-size="10">{hi:.2f}</text>'
        f'<text x="2" y="{HEIGHT - PAD}" font-size="10">{lo:.2f}</text>'
        f'<text x="{WIDTH - 60}" y="{HEIGHT - 6}" font-size="10">{steps} steps</text>'
        + "".join(lines)
        + "</svg>"
    )


def _polyline(values: list[float], lo: float, hi: float, steps: int, colour: str) -> str:
    span = (hi - lo) or 1.0
    dx = (WIDTH - 2 * PAD) / max(1, steps - 1)
    points = " ".join(
        f"{PAD + i * dx:.1f},{PAD + (hi - v) / span * (HEIGHT - 2 * PAD):.1f}"
        for i, v in enumerate(values)
    )
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>'
