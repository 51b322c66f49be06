"""The specserve Grafana dashboard, built with Grafana's `grafana-foundation-sdk` from the panel
catalog (panels.py). `specserve render --all` writes it to
manifests/observability/specserve-dashboard.json; import that file in Grafana (Dashboards → New →
Import) or load the ConfigMap next to it (README, Observability).

Two variables: `datasource` (any Prometheus data source) and `task` (task types present in
`specserve_mean_acceptance_length`, all by default).
"""

from __future__ import annotations

import json

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus as prom_b
from grafana_foundation_sdk.builders import timeseries as ts_b
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common, dashboard

from cluster.observability.panels import ROWS, Panel

UID = "specserve-overview"
TITLE = "specserve: speculative decoding"
PANEL_HEIGHT = 8
PANEL_WIDTH = 12  # two per line of Grafana's 24-column grid
_DATASOURCE = dashboard.DataSourceRef(type_val="prometheus", uid="${datasource}")


def _panel(p: Panel) -> ts_b.Panel:
    panel = (ts_b.Panel().title(p.title).description(p.description).unit(p.unit)
             .datasource(_DATASOURCE).height(PANEL_HEIGHT).span(PANEL_WIDTH)
             .legend(common_b.VizLegendOptions().show_legend(True)
                     .display_mode(common.LegendDisplayMode.LIST)
                     .placement(common.LegendPlacement.BOTTOM))
             .tooltip(common_b.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI)
                      .sort(common.SortOrder.DESCENDING)))
    if p.unit == "percentunit":
        panel = panel.min(0)
    if p.stack:
        panel = panel.stacking(common_b.StackingConfig().mode(common.StackingMode.NORMAL)
                               ).fill_opacity(30)
    if p.bars:
        panel = panel.draw_style(common.GraphDrawStyle.BARS).fill_opacity(60)
    for i, q in enumerate(p.queries):
        panel = panel.with_target(prom_b.Dataquery().expr(q.expr).legend_format(q.legend)
                                  .ref_id(chr(ord("A") + i)).datasource(_DATASOURCE))
    return panel


def build() -> dashboard.Dashboard:
    """The dashboard object (the SDK's model)."""
    board = (dash_b.Dashboard(TITLE).uid(UID).tags(["specserve", "vllm", "speculative-decoding"])
             .description("Routing, speculative-decoding acceptance and speedup, pool load and "
                          "latency, autoscaling and errors of a specserve application.")
             .refresh("30s").time("now-1h", "now").timezone("browser").editable()
             .tooltip(dashboard.DashboardCursorSync.CROSSHAIR)
             .with_variable(dash_b.DatasourceVariable("datasource").label("Prometheus")
                            .type("prometheus"))
             .with_variable(dash_b.QueryVariable("task").label("Task type")
                            .datasource(_DATASOURCE)
                            .query("label_values(specserve_mean_acceptance_length, task)")
                            .refresh(dashboard.VariableRefresh.ON_TIME_RANGE_CHANGED)
                            .multi(True).include_all(True).all_value(".*")
                            .current(dashboard.VariableOption(text="All", value="$__all",
                                                              selected=True))))
    for row in ROWS:
        board = board.with_row(dash_b.Row(row.title))
        for p in row.panels:
            board = board.with_panel(_panel(p))
    return board.build()


def dashboard_json() -> str:
    """The dashboard as Grafana JSON (stable: sorted keys, two-space indent, final newline)."""
    return json.dumps(build(), cls=JSONEncoder, indent=2, sort_keys=True,
                      ensure_ascii=False) + "\n"
