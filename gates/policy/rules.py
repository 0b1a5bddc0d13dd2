"""What a gate policy says, as frozen dataclasses: per task type the guardrails (non-inferiority with
a margin), what may be traded, what must improve, the SLOs for goodput and the minimum samples; per
mechanism and bottleneck the extra rules the source chapter asks for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

POLICY_DIR = Path(__file__).resolve().parents[1] / "policies"

MECHANISMS = ("speculative_decoding", "prefix_cache", "weight_quantization", "kv_cache_quantization")
QUANTIZATION_MECHANISMS = ("weight_quantization", "kv_cache_quantization")
BOTTLENECKS = ("queueing", "prefill", "decode", "kv_memory", "structured_output")
TASK_NAME = re.compile(r"[a-z][a-z0-9_]*")
POLICY_NAME = re.compile(r"[a-z][a-z0-9_-]*")
# Enough to fix a document by; past it a (possibly alias-multiplied) document would only cost time.
MAX_REPORTED_ERRORS = 100
# Bootstrap resamples per metric: the default 2000 is plenty; each one costs time on every judgement.
MAX_N_BOOT = 20_000


class PolicyError(ValueError):
    """A policy document is invalid or cannot be found; ``errors`` lists (path, problem) pairs."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{path}: {problem}" if path else problem for path, problem in errors))


@dataclass(frozen=True)
class MetricRule:
    """One metric of a task: a guardrail, a tradeable metric or an objective."""

    metric: str
    kind: str  # guardrail | tradeable | objective
    label: str
    confidence: float = 0.95
    margin: float | None = None  # guardrails: absolute for rates/scores, relative for perf
    min_improvement: float | None = None  # objectives: absolute for rates/scores, relative for perf
    critical: bool = False
    # Latency guardrails: a slowdown up to this many milliseconds is within the margin too, however
    # large relative to a fast baseline (the margin is the larger of the two).
    slack_ms: float | None = None


@dataclass(frozen=True)
class Slos:
    """Per-request service-level objectives; a request meeting all of them counts toward goodput."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None


@dataclass(frozen=True)
class MinSamples:
    quality: int = 30
    latency: int = 30


@dataclass(frozen=True)
class TaskPolicy:
    task: str
    description: str
    guardrails: tuple[MetricRule, ...]
    tradeable: tuple[MetricRule, ...]
    objectives: tuple[MetricRule, ...]
    slos: Slos
    min_samples: MinSamples


@dataclass(frozen=True)
class SpeculativeDecodingRule:
    """Drafts must be accepted often enough, and E2E P50 and P95 must both beat the baseline."""

    min_acceptance_rate: float = 0.5
    min_e2e_improvement: float = 0.02
    confidence: float = 0.95


@dataclass(frozen=True)
class PrefixCacheRule:
    """The cache must hit, and TTFT on the shared-prefix workload must fall."""

    min_hit_rate: float = 0.3
    min_ttft_improvement: float = 0.1
    confidence: float = 0.95


@dataclass(frozen=True)
class QuantizationRule:
    """Tasks whose quality guardrails become critical (veto) under this mechanism."""

    critical_tasks: tuple[str, ...] = ()


@dataclass(frozen=True)
class BottleneckRule:
    """The ticket's targeted bottleneck: the first metric with evidence must move."""

    bottleneck: str
    metrics: tuple[str, ...]
    min_improvement: float = 0.05
    confidence: float = 0.95


@dataclass(frozen=True)
class MeasurementRule:
    """When two runs' client-side timings can be compared at all (see ``gates.judge.validity``).

    The load client's TTFT is the engine's own TTFT plus delivery (HTTP, streaming, time the
    client or the API server sat starved of CPU). If delivery differs between the runs by more
    than ``max_delivery_shift_ms``, a latency difference may be the machine's, not the candidate's.
    """

    max_delivery_shift_ms: float = 20.0


OWNER_IMPORTED_CHOICES = ("inform", "approve")
REFUSE_UNSETTLEABLE_CHOICES = ("measured", "always", "never")


@dataclass(frozen=True)
class EvidenceRule:
    """What evidence a person imported (rather than OptGate measured) may do.

    ``owner_imported: inform`` (the default): evidence the ticket's own owner imported informs the
    decision, but no reviewer approves or restricts on it until a reviewer other than the owner
    has accepted it, with a reason. ``approve``: it counts like measured evidence.
    """

    owner_imported: str = "inform"


@dataclass(frozen=True)
class PowerPlanRule:
    """The power plan at filing (``gates.selectors.plan``): what it assumes, and when it refuses.

    ``discordance_default``: the share of paired samples assumed to differ between baseline and
    candidate when the baseline has neither an A/A calibration nor history to measure it from.
    ``refuse_unsettleable``: ``measured`` (the default) refuses a ticket whose margin needs more
    paired samples than the suite holds only when that discordance was measured, since a refusal
    should rest on evidence; with the assumed default the plan warns instead. ``always`` refuses
    on the assumed default too; ``never`` only shows the plan.
    """

    discordance_default: float = 0.05
    refuse_unsettleable: str = "measured"


SPENDING_CHOICES = ("obrien_fleming", "pocock")
FUTILITY_CHOICES = ("pocock", "obrien_fleming", "none")
INFORMATION_CHOICES = ("pairs", "observed")
STAGE_SIZE_CHOICES = ("shipped", "planned")
# Stage sizes are the shipped suite's (100 samples; 200 for compliance_qa), and the held-out pool
# holds 1,000 more: six stages fit every suite.
MAX_LOOKS = 6


@dataclass(frozen=True)
class SequentialRule:
    """Staged evaluation of pass-rate guardrails (``gates.judge.staged``, docs/sequential.md).

    Absent from a policy (``enabled`` False, every policy before ``default@5``), a pass-rate
    guardrail is judged once on the first pair of runs, as before. Present, the worker evaluates
    in stages of the suite's shipped size (stage one the shipped samples, the next ones held out)
    and the judge decides each task after each stage with a group-sequential boundary:

    * ``looks``: the design's looks, the most stages a task is evaluated in;
    * ``stages_per_evaluation``: how many of them one evaluation request may take (the engine-time
      budget); *Evaluate again* on a needs-evidence ticket continues the same design;
    * ``alpha_spending``: the efficacy (and mirrored harm) boundaries' spending function;
    * ``futility``: the non-binding futility boundary's beta spending (``none``: no futility stop);
    * ``power``: the power the futility boundary is planned for, against a neutral change;
    * ``information``: what a look's information fraction counts — ``pairs`` (the pairs over
      ``looks`` × stage size) or ``observed`` (the score's observed information over what that
      many pairs carry at the planned discordance, so a change with few discordant pairs settles
      in fewer stages; docs/sequential.md);
    * ``stage_size``: how large the stages after the first are — ``shipped`` (as many held-out
      samples as the shipped suite, whatever the margin) or ``planned`` (stage one the shipped
      suite, then ``looks − 1`` equal held-out stages reaching the power plan's maximum at
      ``power_plan.discordance_default``, at most the pool: a 2-point margin gets stages of 250
      where ``shipped`` gives it 100, and the power its plan promised; ``power.shipped_first_sizes``).
    """

    enabled: bool = False
    looks: int = 5
    stages_per_evaluation: int = 5
    alpha_spending: str = "obrien_fleming"
    futility: str = "pocock"
    power: float = 0.8
    information: str = "pairs"
    stage_size: str = "shipped"


@dataclass(frozen=True)
class CanarySignal:
    """One guardrail of a canary round: the candidate slice may not be worse than the baseline's
    beyond ``margin`` (points for rates, relative for latencies); ``critical`` rolls the task back."""

    metric: str
    label: str
    margin: float
    confidence: float = 0.95
    critical: bool = False


DEFAULT_CANARY_SIGNALS = (
    CanarySignal("error_rate", "error rate", 0.01, critical=True),
    CanarySignal("parse_error_rate", "structured-output parse-error rate", 0.02, critical=True),
    CanarySignal("tool_arg_error_rate", "tool-argument error rate", 0.02, critical=True),
    CanarySignal("refusal_rate", "refusal rate", 0.02),
    CanarySignal("human_return_rate", "human-return rate", 0.02),
    CanarySignal("ttft_p95", "TTFT P95", 0.5),
    CanarySignal("e2e_p95", "E2E latency P95", 0.5),
)


@dataclass(frozen=True)
class CanaryRule:
    """Live analysis during the canary (``gates.services.canary``, docs/canary.md).

    Every ``interval_minutes`` a round compares each canary task's candidate slice (the canary
    tenants on the candidate) with its baseline slice over the last interval. A slice with fewer
    than ``min_requests_per_round`` requests is inconclusive; more than ``max_inconclusive_rounds``
    inconclusive rounds in a row pause the canary for people. A critical signal broken rolls that
    task back to the rollback target when ``auto_rollback``, else proposes it in a review.
    Promotion needs the window's end, no failed round, every inconclusive round settled by the
    whole window (every round's traffic pooled, judged at the window's end, passing),
    ``min_requests`` candidate requests per task over the canary, and per task at least one
    passing round at a peak period: its traffic on the task (every backend and tenant) at least
    ``peak_fraction`` of the task's busiest ``peak_period_minutes`` over the last
    ``peak_lookback_hours`` (``peak_fraction: 0`` drops the
    condition). Time alone never promotes. The first ``warmup_minutes`` of the canary are not
    judged: a candidate starts with cold caches (a prefix cache holds none of the tenants'
    documents yet), and the first round's window begins when the warm-up ends, one interval before
    that round.
    """

    interval_minutes: float = 5.0
    warmup_minutes: float = 0.0
    min_requests_per_round: int = 50
    min_requests: int = 1000
    max_inconclusive_rounds: int = 3
    auto_rollback: bool = False
    signals: tuple[CanarySignal, ...] = DEFAULT_CANARY_SIGNALS
    peak_fraction: float = 0.8
    peak_period_minutes: float = 60.0
    peak_lookback_hours: float = 168.0


@dataclass(frozen=True)
class Policy:
    """A validated, versioned gate policy."""

    name: str
    version: int
    dry_run: bool
    description: str
    tasks: Mapping[str, TaskPolicy]
    speculative_decoding: SpeculativeDecodingRule
    prefix_cache: PrefixCacheRule
    quantization: Mapping[str, QuantizationRule]
    bottlenecks: Mapping[str, BottleneckRule]
    measurement: MeasurementRule = field(default_factory=MeasurementRule)
    evidence: EvidenceRule = field(default_factory=EvidenceRule)
    power_plan: PowerPlanRule = field(default_factory=PowerPlanRule)
    canary: CanaryRule = field(default_factory=CanaryRule)
    sequential: SequentialRule = field(default_factory=SequentialRule)
    n_boot: int = 2000
    seed: int = 0
    source: str | None = field(default=None, compare=False)

    @property
    def version_label(self) -> str:
        return f"{self.name}@{self.version}"

    def task(self, task: str) -> TaskPolicy | None:
        return self.tasks.get(task)

    def critical_tasks_for(self, mechanisms: tuple[str, ...] | list[str]) -> frozenset[str]:
        """Tasks whose quality guardrails veto, given the ticket's mechanisms."""
        names: set[str] = set()
        for mechanism in mechanisms:
            rule = self.quantization.get(mechanism)
            if rule:
                names.update(rule.critical_tasks)
        return frozenset(names)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["version_label"] = self.version_label
        return data
