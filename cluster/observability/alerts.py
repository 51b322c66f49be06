"""specserve's Prometheus alert rules: each a signal compared with a threshold, held for a while.

An alert fires when `signal <op> threshold` holds for `for_`; keeping the two sides apart lets the
real-Prometheus test evaluate each side on live series (a typo'd name returns nothing), and lets
`promtool test rules` (tests/unit/test_alerts.py) show that each rule fires on its scenario and not on
a healthy one. Rendered as a Prometheus rule file and as a PrometheusRule (cluster/observability/
manifests.py) by `specserve render --all`.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.observability.panels import POOLS_RE, REFUSED, TPOT
from cluster.observability.promql import mean, rate, ratio_by

GROUP = "specserve"
DRIFT_FRACTION = 0.7  # acceptance below 70% of its trailing average is drift
SLOWER_FRACTION = 0.8  # realized S below 80% of the predicted S
MAX_429_FRACTION = 0.05


@dataclass(frozen=True, slots=True)
class Alert:
    """One alerting rule.

    Attributes:
        name: the alert's name (`alertname`).
        signal: PromQL of the watched quantity (non-empty on a healthy, serving application).
        op: `<` or `>`: the alert holds while `signal op threshold`.
        threshold: PromQL (a number or an expression over the same labels).
        for_: how long it must hold before firing (Prometheus duration).
        severity: `warning` or `critical` (label).
        summary: one line, with Prometheus template fields (`{{ $labels.pool }}`, `{{ $value }}`).
        description: what it means and where to look.
    """

    name: str
    signal: str
    op: str
    threshold: str
    for_: str
    severity: str
    summary: str
    description: str

    @property
    def expr(self) -> str:
        """The rule's expression."""
        return f"({self.signal}) {self.op} ({self.threshold})"

    def rule(self) -> dict:
        """The rule as a Prometheus rule file entry."""
        return {"alert": self.name, "expr": self.expr, "for": self.for_,
                "labels": {"severity": self.severity},
                "annotations": {"summary": self.summary, "description": self.description}}


_LENGTH = "specserve_mean_acceptance_length"
_ACCEPTED = "specserve_spec_decode_num_accepted_tokens_total"
_DRAFTED = "specserve_spec_decode_num_draft_tokens_total"


def _realized_speedup(window: str) -> str:
    return (mean(TPOT, 'deployment="vanilla"', window) + " / "
            + mean(TPOT, 'deployment="speculative"', window))


def _predicted_speedup(window: str) -> str:
    return mean("specserve_expected_speedup", 'route="speculative"', window)


ALERTS: tuple[Alert, ...] = (
    Alert("SpecserveAcceptanceDrift",
          f"avg_over_time({_LENGTH}[30m]) - 1",
          "<", f"{DRIFT_FRACTION} * (avg_over_time({_LENGTH}[6h]) - 1)", "15m", "warning",
          "Acceptance of {{ $labels.task }} requests at {{ $labels.temperature }} "
          "({{ $labels.context }} context) fell to "
          "{{ $value | printf \"%.2f\" }} accepted tokens per step, below "
          f"{DRIFT_FRACTION:.0%} of its 6 h average",
          "The router's acceptance estimate for this task type, temperature and context bucket "
          "(E[τ] − 1, accepted draft tokens per verification step, last 30 min) drifted below "
          "its trailing average: traffic or the target changed under the speculator. The "
          "router already sends less of it speculative; retrain or re-distill the speculator."),
    Alert("SpecserveEngineAcceptanceDrift",
          ratio_by(_ACCEPTED, _DRAFTED, window="30m"),
          "<", f"{DRIFT_FRACTION} * {ratio_by(_ACCEPTED, _DRAFTED, window='6h')}", "15m",
          "warning",
          "The {{ $labels.pool }} pool's acceptance rate fell to "
          "{{ $value | humanizePercentage }}, "
          f"below {DRIFT_FRACTION:.0%} of its 6 h average",
          "Accepted / proposed draft tokens of the pool's engines (vLLM's counters, last 30 "
          "min) against the trailing 6 h: acceptance drifts down across every task type."),
    Alert("SpecserveSpeculativeSlowerThanPredicted",
          _realized_speedup("15m"),
          "<", f"{SLOWER_FRACTION} * {_predicted_speedup('15m')}",
          "15m", "warning",
          "Speculation realizes a speedup of {{ $value | printf \"%.2f\" }}, below "
          f"{SLOWER_FRACTION:.0%} of what the router predicts",
          "Realized S (mean time per output token of the vanilla pool over the speculative "
          "pool's, last 15 min) against the mean S the router predicted for the requests that "
          "pool served: its cost model (step-time profile, acceptance) is off, so it "
          "sends requests speculative that would run faster on vanilla."),
    Alert("SpecserveSustained429",
          f"sum({rate('specserve_requests_total', REFUSED, '5m')}) / "
          f"sum({rate('specserve_requests_total', window='5m')})",
          ">", f"{MAX_429_FRACTION}", "10m", "warning",
          "{{ $value | humanizePercentage }} of requests get 429 (both pools full)",
          "Both pools are at their in-flight bound (server.max_in_flight_per_replica × live "
          "replicas) for a sustained time: the autoscaler's budget is spent or its bounds are "
          "too low."),
    Alert("SpecservePoolWithoutLiveReplica",
          f'sum by (deployment) (ray_serve_deployment_replica_healthy{{deployment=~"{POOLS_RE}"}})',
          "<", "1", "2m", "critical",
          "The {{ $labels.deployment }} pool has no healthy replica",
          "Serve counts no healthy replica in the pool: the router sends its requests to the "
          "other pool (reason pool_unavailable), or answers 503 when neither has one."),
)


def rule_groups() -> dict:
    """The Prometheus rule file's content: one group with every alert."""
    return {"groups": [{"name": GROUP, "rules": [a.rule() for a in ALERTS]}]}
