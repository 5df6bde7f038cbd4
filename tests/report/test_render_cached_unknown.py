"""The report when the server reported no cached tokens: "unknown", and the price revenue assumed."""

from benchcamp_test_factory import make_campaign

from benchcamp.metrics import PRICE_BASIS_UNCACHED
from benchcamp.report import render


def test_report_says_cache_hit_unknown_and_which_price_revenue_assumed(tmp_path):
    camp = make_campaign(tmp_path, levels=(8,))
    known = render(camp, out_dir=tmp_path / "known").read_text()
    assert "Cached tokens unknown" not in known and ">unknown<" not in known
    for p in camp.points:     # as summarize() reports a server whose usage has no cached_tokens
        p.summary.update(cache_hit_rate_client=None, cached_tokens_reported=0.0,
                         revenue_price_basis=PRICE_BASIS_UNCACHED)
    page = render(camp, out_dir=tmp_path / "unknown").read_text()
    assert "<th>cache hit</th>" in page and page.count(">unknown<") == len(camp.points)
    assert "Cached tokens unknown" in page and PRICE_BASIS_UNCACHED in page
