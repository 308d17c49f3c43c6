"""docs/metrics.md lists every metric the collectors emit, as generated from their specs."""

from pathlib import Path

from ferrymq.metrics.catalog import rewrite

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_metrics_doc_is_current():
    text = DOC.read_text()
    assert rewrite(text) == text, "run: python -m ferrymq.metrics.catalog docs/metrics.md"
