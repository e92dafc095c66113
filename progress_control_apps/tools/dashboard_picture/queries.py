"""The dashboard's queries and the chart's alerts over the run, and what a run keeps."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from progress_control_apps.tools.dashboard_picture.config import SCRAPE_INTERVAL_S
from progress_control_apps.tools.dashboard_picture.prometheus import Prometheus


@dataclass(frozen=True)
class Series:
    legend: str
    times: list[float]
    values: list[float]


@dataclass(frozen=True)
class TargetResult:
    ref_id: str
    expr: str
    series: list[Series]


@dataclass(frozen=True)
class PanelResult:
    panel: dict[str, Any]
    targets: list[TargetResult]

    @property
    def series(self) -> list[Series]:
        return [s for target in self.targets for s in target.series]


def grafana_variables(dashboard: Mapping[str, Any], step_s: float) -> dict[str, str]:
    """Values for the dashboard's template variables (each query variable at All) and for
    Grafana's built-in interval variables."""
    values = {
        "__interval": f"{int(step_s)}s",
        "__rate_interval": f"{int(max(4 * SCRAPE_INTERVAL_S, step_s + SCRAPE_INTERVAL_S))}s",
    }
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") in {"query", "custom"}:
            values[variable["name"]] = variable.get("allValue") or ".*"
    return values


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """``$name`` and ``${name}`` replaced as Grafana does (longest names first)."""
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(f"${{{name}}}", variables[name]).replace(f"${name}", variables[name])
    return expr


def _legend(template: str, labels: Mapping[str, str]) -> str:
    if not template:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return f"{{{inner}}}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def query_panels(
    prometheus: Prometheus, dashboard: Mapping[str, Any], start: float, end: float
) -> list[PanelResult]:
    step = float(SCRAPE_INTERVAL_S)
    variables = grafana_variables(dashboard, step)
    results = []
    for panel in dashboard["panels"]:
        targets = []
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], variables)
            series = [
                Series(
                    _legend(target.get("legendFormat", ""), item["metric"]),
                    [float(t) for t, _ in item["values"]],
                    [float(v) for _, v in item["values"]],
                )
                for item in prometheus.query_range(expr, start, end, step)
            ]
            targets.append(TargetResult(target.get("refId", "?"), expr, series))
        results.append(PanelResult(panel, targets))
    return results


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?P<match>.+?)\s*,\s*(?P<label>\w+)\s*\)\s*$")


def query_variables(
    prometheus: Prometheus, dashboard: Mapping[str, Any], start: float, end: float
) -> dict[str, list[str]]:
    """The values each ``label_values(...)`` template variable would offer over the run."""
    found = {}
    for variable in dashboard.get("templating", {}).get("list", []):
        match = _LABEL_VALUES.match(str(variable.get("query", "")))
        if variable.get("type") == "query" and match:
            found[variable["name"]] = prometheus.api(
                f"label/{match['label']}/values",
                **{"match[]": match["match"], "start": f"{start:.3f}", "end": f"{end:.3f}"},
            )
    return found


@dataclass(frozen=True)
class AlertResult:
    name: str
    expr: str
    operands: list[tuple[str, int]]
    """Each side of the rule's ``and``, its comparison left out, and how many series it had."""
    states: list[str]
    """Alert states seen over the run (``ALERTS``): pending, firing."""
    final_state: str
    health: str


_COMPARISON = re.compile(r"\s*(?:==|!=|>=|<=|>|<)\s*-?\d+(?:\.\d+)?(?=\s|$)")


def query_alerts(prometheus: Prometheus, start: float, end: float) -> list[AlertResult]:
    """Each loaded alert rule: its operands' series over the run, and its states."""
    step = float(SCRAPE_INTERVAL_S)
    results = []
    for group in prometheus.api("rules")["groups"]:
        for rule in group["rules"]:
            if rule.get("type") != "alerting":
                continue
            operands = []
            for part in re.split(r"\s+and\s+", rule["query"]):
                operand = _COMPARISON.sub("", part).strip()
                operands.append((operand, len(prometheus.query_range(operand, start, end, step))))
            history = prometheus.query_range(
                f'ALERTS{{alertname="{rule["name"]}"}}', start, end, step
            )
            states = sorted({item["metric"].get("alertstate", "?") for item in history})
            results.append(
                AlertResult(
                    rule["name"],
                    rule["query"],
                    operands,
                    states,
                    rule.get("state", "?"),
                    rule.get("health", "?"),
                )
            )
    return results


def report(result: RunResult, out: TextIO) -> None:
    panels, alerts = result.panels, result.alerts
    out.write("\nTemplate variables (label_values over the run):\n")
    for name, values in result.variables.items():
        out.write(f"  ${name}: {', '.join(values) if values else 'NO VALUES'}\n")
    out.write("\nPanels (each query over the run):\n")
    for panel in panels:
        out.write(f"  {panel.panel['title']}\n")
        for target in panel.targets:
            if not target.series:
                out.write(f"    {target.ref_id}: NO DATA  {target.expr}\n")
                continue
            peak = max((v for s in target.series for v in s.values if math.isfinite(v)), default=0)
            legends = ", ".join(s.legend for s in target.series)
            out.write(
                f"    {target.ref_id}: {len(target.series)} series, max {peak:.4g}: {legends}\n"
            )
    out.write("\nAlert rules (the chart's PrometheusRule, evaluated by Prometheus):\n")
    for alert in alerts:
        seen = ", ".join(alert.states) or "never pending or firing"
        out.write(f"  {alert.name}: {alert.final_state} at the end ({seen}; {alert.health})\n")
        for operand, count in alert.operands:
            out.write(
                f"    {count} series: {operand}\n" if count else f"    NO SERIES: {operand}\n"
            )


@dataclass(frozen=True)
class RunResult:
    start: float
    end: float
    panels: list[PanelResult]
    alerts: list[AlertResult]
    variables: dict[str, list[str]] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def load(cls, path: Path) -> RunResult:
        data = json.loads(path.read_text())
        panels = [
            PanelResult(
                p["panel"],
                [
                    TargetResult(t["ref_id"], t["expr"], [Series(**s) for s in t["series"]])
                    for t in p["targets"]
                ],
            )
            for p in data["panels"]
        ]
        alerts = [AlertResult(**{**a, "operands": [tuple(o) for o in a["operands"]]})
                  for a in data["alerts"]]  # fmt: skip
        return cls(data["start"], data["end"], panels, alerts, data.get("variables", {}))
