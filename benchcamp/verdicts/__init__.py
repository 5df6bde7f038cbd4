"""Is tonight worse? Published and historical baselines, the comparison of a point against them, and the
notification of a verdict."""
