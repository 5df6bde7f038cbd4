"""The campaign report (HTML page, DVC metrics and plot data) and the
track -> compare -> report flow that ends every campaign."""

from benchcamp.report.render import render

__all__ = ["render"]
