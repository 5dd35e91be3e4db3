"""The page's charts (JSON, as `gr.Plot` shows them) as plotly figures for tests to read.
Building the figure checks it too: an attribute plotly does not know raises."""
from __future__ import annotations

import plotly.graph_objects as go

from demo.charts import figure_of


def figure(plot) -> go.Figure:
    return go.Figure(figure_of(plot))
