"""Gate policies: versioned YAML documents, validated on load into the frozen dataclasses of
``gates.policy.rules``.

A policy says, per task type, which metrics are guardrails (non-inferiority with a margin),
which may be traded, which must improve, the SLOs used for goodput and the minimum sample counts;
and, per mechanism, the extra rules the source chapter asks for. An invalid document raises
:class:`PolicyError` whose message names the path in the document and the problem, e.g.
``tasks.dataagent_nl2sql.guardrails[0].margin: must be a number between 0 and 1``.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gates.policy.metrics import CANARY_SIGNALS, METRIC_SPECS, is_quality
from gates.policy.rules import (
    BOTTLENECKS,
    FUTILITY_CHOICES,
    INFORMATION_CHOICES,
    MAX_LOOKS,
    MAX_N_BOOT,
    MAX_REPORTED_ERRORS,
    MECHANISMS,
    OWNER_IMPORTED_CHOICES,
    POLICY_DIR,
    POLICY_NAME,
    QUANTIZATION_MECHANISMS,
    REFUSE_UNSETTLEABLE_CHOICES,
    SPENDING_CHOICES,
    STAGE_SIZE_CHOICES,
    TASK_NAME,
    BottleneckRule,
    CanaryRule,
    CanarySignal,
    EvidenceRule,
    MeasurementRule,
    MetricRule,
    MinSamples,
    Policy,
    PolicyError,
    PowerPlanRule,
    PrefixCacheRule,
    QuantizationRule,
    SequentialRule,
    Slos,
    SpeculativeDecodingRule,
    TaskPolicy,
)


class _TooManyErrors(Exception):
    pass


class _Validator:
    """Walks a parsed document, collecting every (path, problem) instead of stopping at the first."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def error(self, path: str, problem: str) -> None:
        self.errors.append((path, problem))
        if len(self.errors) >= MAX_REPORTED_ERRORS:
            raise _TooManyErrors

    def mapping(
        self, value: Any, path: str, allowed: set[str], required: frozenset[str] | set[str] = frozenset()
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.error(path, "must be a mapping")
            return {}
        for key in sorted(set(value) - allowed, key=str):
            self.error(_join(path, str(key)), f"unknown key (allowed: {', '.join(sorted(allowed))})")
        for key in sorted(required - set(value)):
            self.error(_join(path, key), "is required")
        return value

    def number(
        self, value: Any, path: str, low: float, high: float, default: float, *, open_high: bool = False
    ) -> float:
        if value is None:
            return default
        bad = isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
        if not bad and (value < low or value > high or (open_high and value >= high)):
            bad = True
        if bad:
            upper = f"below {high:g}" if open_high else f"{high:g}"
            self.error(path, f"must be a number between {low:g} and {upper}")
            return default
        return float(value)

    def integer(self, value: Any, path: str, low: int, default: int, high: int | None = None) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            wanted = f"an integer from {low} to {high}" if high is not None else f"an integer of at least {low}"
            self.error(path, f"must be {wanted}")
            return default
        return value

    def boolean(self, value: Any, path: str, default: bool) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(path, "must be true or false")
            return default
        return value

    def string(self, value: Any, path: str, default: str = "") -> str:
        if value is None:
            return default
        if not isinstance(value, str):
            self.error(path, "must be a string")
            return default
        return value

    def metric_name(self, value: Any, path: str) -> str | None:
        if not isinstance(value, str) or value not in METRIC_SPECS:
            self.error(path, f"unknown metric {value!r} (known: {', '.join(sorted(METRIC_SPECS))})")
            return None
        return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


_RULE_KEYS = {
    "guardrail": {"metric", "label", "margin", "confidence", "critical", "slack_ms"},
    "tradeable": {"metric", "label"},
    "objective": {"metric", "label", "min_improvement", "confidence"},
}


def _metric_rules(v: _Validator, items: Any, path: str, kind: str) -> tuple[MetricRule, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        v.error(path, "must be a list")
        return ()
    rules = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        item_path = f"{path}[{index}]"
        raw = v.mapping(item, item_path, _RULE_KEYS[kind], {"metric"})
        if not raw:
            continue
        metric = v.metric_name(raw.get("metric"), f"{item_path}.metric")
        if metric is None:
            continue
        if metric in seen:
            v.error(f"{item_path}.metric", f"{metric} is listed twice")
            continue
        seen.add(metric)
        label = v.string(raw.get("label"), f"{item_path}.label", METRIC_SPECS[metric].label)
        confidence = v.number(raw.get("confidence"), f"{item_path}.confidence", 0.5, 1, 0.95, open_high=True)
        if kind == "guardrail":
            if "margin" not in raw:
                v.error(f"{item_path}.margin", "is required")
            margin = v.number(raw.get("margin"), f"{item_path}.margin", 0, 1, 0.0)
            critical = v.boolean(raw.get("critical"), f"{item_path}.critical", False)
            slack = None
            if "slack_ms" in raw:
                if METRIC_SPECS[metric].family != "latency":
                    v.error(f"{item_path}.slack_ms", f"applies to latency guardrails only, not {metric}")
                slack = v.number(raw.get("slack_ms"), f"{item_path}.slack_ms", 0, 60_000, 0.0)
            rules.append(MetricRule(metric, kind, label, confidence, margin=margin, critical=critical, slack_ms=slack))
        elif kind == "objective":
            gain = v.number(raw.get("min_improvement"), f"{item_path}.min_improvement", 0, 1, 0.0)
            rules.append(MetricRule(metric, kind, label, confidence, min_improvement=gain))
        else:
            rules.append(MetricRule(metric, kind, label, confidence))
    return tuple(rules)


def _task_policy(v: _Validator, task: str, raw: Any, path: str) -> TaskPolicy:
    raw = v.mapping(
        raw, path, {"description", "guardrails", "tradeable", "objectives", "slos", "min_samples"}, {"guardrails"}
    )
    guardrails = _metric_rules(v, raw.get("guardrails"), f"{path}.guardrails", "guardrail")
    if raw and not any(is_quality(rule.metric) for rule in guardrails) and "guardrails" in raw:
        v.error(f"{path}.guardrails", "must include at least one quality metric (a pass/fail rate or score)")
    slos_raw = v.mapping(raw.get("slos") or {}, f"{path}.slos", {"ttft_ms", "tpot_ms", "e2e_ms"})
    slos = Slos(
        **{
            key: (v.number(slos_raw[key], f"{path}.slos.{key}", 0, 3_600_000, 0.0) if key in slos_raw else None)
            for key in ("ttft_ms", "tpot_ms", "e2e_ms")
        }
    )
    min_raw = v.mapping(raw.get("min_samples") or {}, f"{path}.min_samples", {"quality", "latency"})
    min_samples = MinSamples(
        quality=v.integer(min_raw.get("quality"), f"{path}.min_samples.quality", 1, 30),
        latency=v.integer(min_raw.get("latency"), f"{path}.min_samples.latency", 1, 30),
    )
    return TaskPolicy(
        task=task,
        description=v.string(raw.get("description"), f"{path}.description"),
        guardrails=guardrails,
        tradeable=_metric_rules(v, raw.get("tradeable"), f"{path}.tradeable", "tradeable"),
        objectives=_metric_rules(v, raw.get("objectives"), f"{path}.objectives", "objective"),
        slos=slos,
        min_samples=min_samples,
    )


def _mechanisms(
    v: _Validator, raw: Any, tasks: Mapping[str, TaskPolicy]
) -> tuple[SpeculativeDecodingRule, PrefixCacheRule, dict[str, QuantizationRule]]:
    raw = v.mapping(raw or {}, "mechanisms", set(MECHANISMS))
    sd = v.mapping(
        raw.get("speculative_decoding") or {},
        "mechanisms.speculative_decoding",
        {"min_acceptance_rate", "min_e2e_improvement", "confidence"},
    )
    speculative = SpeculativeDecodingRule(
        min_acceptance_rate=v.number(
            sd.get("min_acceptance_rate"), "mechanisms.speculative_decoding.min_acceptance_rate", 0, 1, 0.5
        ),
        min_e2e_improvement=v.number(
            sd.get("min_e2e_improvement"), "mechanisms.speculative_decoding.min_e2e_improvement", 0, 1, 0.02
        ),
        confidence=v.number(
            sd.get("confidence"), "mechanisms.speculative_decoding.confidence", 0.5, 1, 0.95, open_high=True
        ),
    )
    pc = v.mapping(
        raw.get("prefix_cache") or {}, "mechanisms.prefix_cache", {"min_hit_rate", "min_ttft_improvement", "confidence"}
    )
    prefix = PrefixCacheRule(
        min_hit_rate=v.number(pc.get("min_hit_rate"), "mechanisms.prefix_cache.min_hit_rate", 0, 1, 0.3),
        min_ttft_improvement=v.number(
            pc.get("min_ttft_improvement"), "mechanisms.prefix_cache.min_ttft_improvement", 0, 1, 0.1
        ),
        confidence=v.number(pc.get("confidence"), "mechanisms.prefix_cache.confidence", 0.5, 1, 0.95, open_high=True),
    )
    quantization = {}
    for mechanism in QUANTIZATION_MECHANISMS:
        path = f"mechanisms.{mechanism}"
        q = v.mapping(raw.get(mechanism) or {}, path, {"critical_tasks"})
        names = q.get("critical_tasks") or []
        if not isinstance(names, list):
            v.error(f"{path}.critical_tasks", "must be a list of task types")
            names = []
        for index, name in enumerate(names):
            if not isinstance(name, str):
                v.error(f"{path}.critical_tasks[{index}]", f"must be a task type name, got {type(name).__name__}")
            elif name not in tasks:
                v.error(f"{path}.critical_tasks[{index}]", f"unknown task type {name!r} (not under tasks)")
        quantization[mechanism] = QuantizationRule(tuple(str(name) for name in names))
    return speculative, prefix, quantization


def _bottlenecks(v: _Validator, raw: Any) -> dict[str, BottleneckRule]:
    raw = v.mapping(raw or {}, "bottlenecks", set(BOTTLENECKS))
    rules = {}
    for name, item in raw.items():
        path = f"bottlenecks.{name}"
        item = v.mapping(item, path, {"metrics", "min_improvement", "confidence"}, {"metrics"})
        metrics = item.get("metrics")
        if not isinstance(metrics, list) or not metrics:
            if "metrics" in item:
                v.error(f"{path}.metrics", "must be a non-empty list of metrics")
            continue
        names = tuple(m for i, m in enumerate(metrics) if v.metric_name(m, f"{path}.metrics[{i}]"))
        rules[name] = BottleneckRule(
            bottleneck=name,
            metrics=names,
            min_improvement=v.number(item.get("min_improvement"), f"{path}.min_improvement", 0, 1, 0.05),
            confidence=v.number(item.get("confidence"), f"{path}.confidence", 0.5, 1, 0.95, open_high=True),
        )
    return rules


def _power_plan(v: _Validator, raw: Any) -> PowerPlanRule:
    raw = v.mapping(raw or {}, "power_plan", {"discordance_default", "refuse_unsettleable"})
    # Above 0 so a default never claims a seed-only change; 0.5 is already every other answer flipping.
    discordance = v.number(raw.get("discordance_default"), "power_plan.discordance_default", 0.001, 0.5, 0.05)
    refuse = v.string(raw.get("refuse_unsettleable"), "power_plan.refuse_unsettleable", "measured")
    if refuse not in REFUSE_UNSETTLEABLE_CHOICES:
        v.error("power_plan.refuse_unsettleable", f"must be one of {', '.join(REFUSE_UNSETTLEABLE_CHOICES)}")
        refuse = "measured"
    return PowerPlanRule(discordance_default=discordance, refuse_unsettleable=refuse)


def _canary(v: _Validator, raw: Any) -> CanaryRule:
    keys = {
        "interval_minutes",
        "warmup_minutes",
        "min_requests_per_round",
        "min_requests",
        "max_inconclusive_rounds",
        "auto_rollback",
        "signals",
        "peak_fraction",
        "peak_period_minutes",
        "peak_lookback_hours",
    }
    raw = v.mapping(raw or {}, "canary", keys)
    defaults = CanaryRule()
    signals = defaults.signals
    if "signals" in raw:
        items = raw.get("signals")
        if not isinstance(items, list) or not items:
            v.error("canary.signals", "must be a non-empty list of signals")
            items = []
        parsed: list[CanarySignal] = []
        for index, item in enumerate(items):
            path = f"canary.signals[{index}]"
            item = v.mapping(item, path, {"metric", "label", "margin", "confidence", "critical"}, {"metric", "margin"})
            if not item:
                continue
            metric = item.get("metric")
            if not isinstance(metric, str) or metric not in CANARY_SIGNALS:
                v.error(f"{path}.metric", f"unknown canary signal {metric!r} (known: {', '.join(CANARY_SIGNALS)})")
                continue
            if any(signal.metric == metric for signal in parsed):
                v.error(f"{path}.metric", f"{metric} is listed twice")
                continue
            parsed.append(
                CanarySignal(
                    metric=metric,
                    label=v.string(item.get("label"), f"{path}.label", CANARY_SIGNALS[metric].label),
                    margin=v.number(item.get("margin"), f"{path}.margin", 0, 1, 0.0),
                    confidence=v.number(item.get("confidence"), f"{path}.confidence", 0.5, 1, 0.95, open_high=True),
                    critical=v.boolean(item.get("critical"), f"{path}.critical", False),
                )
            )
        signals = tuple(parsed)
    return CanaryRule(
        # Down to 3 s so a test can run rounds over a few seconds of scrapes; a real canary uses minutes.
        interval_minutes=v.number(
            raw.get("interval_minutes"), "canary.interval_minutes", 0.05, 1440, defaults.interval_minutes
        ),
        warmup_minutes=v.number(raw.get("warmup_minutes"), "canary.warmup_minutes", 0, 1440, defaults.warmup_minutes),
        min_requests_per_round=v.integer(
            raw.get("min_requests_per_round"), "canary.min_requests_per_round", 1, defaults.min_requests_per_round
        ),
        min_requests=v.integer(raw.get("min_requests"), "canary.min_requests", 1, defaults.min_requests),
        max_inconclusive_rounds=v.integer(
            raw.get("max_inconclusive_rounds"), "canary.max_inconclusive_rounds", 0, defaults.max_inconclusive_rounds
        ),
        auto_rollback=v.boolean(raw.get("auto_rollback"), "canary.auto_rollback", defaults.auto_rollback),
        signals=signals,
        peak_fraction=v.number(raw.get("peak_fraction"), "canary.peak_fraction", 0, 1, defaults.peak_fraction),
        peak_period_minutes=v.number(
            raw.get("peak_period_minutes"), "canary.peak_period_minutes", 0.05, 1440, defaults.peak_period_minutes
        ),
        peak_lookback_hours=v.number(
            raw.get("peak_lookback_hours"), "canary.peak_lookback_hours", 0.01, 24 * 90, defaults.peak_lookback_hours
        ),
    )


def _sequential(v: _Validator, raw: Any) -> SequentialRule:
    if raw is None:
        return SequentialRule()  # no section: the fixed design, as every policy before default@5
    keys = {
        "enabled",
        "looks",
        "stages_per_evaluation",
        "alpha_spending",
        "futility",
        "power",
        "information",
        "stage_size",
    }
    raw = v.mapping(raw, "sequential", keys)
    looks = v.integer(raw.get("looks"), "sequential.looks", 2, 5, high=MAX_LOOKS)
    per_evaluation = v.integer(
        raw.get("stages_per_evaluation"), "sequential.stages_per_evaluation", 1, looks, high=looks
    )
    spending = v.string(raw.get("alpha_spending"), "sequential.alpha_spending", "obrien_fleming")
    if spending not in SPENDING_CHOICES:
        v.error("sequential.alpha_spending", f"must be one of {', '.join(SPENDING_CHOICES)}")
    futility = v.string(raw.get("futility"), "sequential.futility", "pocock")
    if futility not in FUTILITY_CHOICES:
        v.error("sequential.futility", f"must be one of {', '.join(FUTILITY_CHOICES)}")
    information = v.string(raw.get("information"), "sequential.information", "pairs")
    if information not in INFORMATION_CHOICES:
        v.error("sequential.information", f"must be one of {', '.join(INFORMATION_CHOICES)}")
    stage_size = v.string(raw.get("stage_size"), "sequential.stage_size", "shipped")
    if stage_size not in STAGE_SIZE_CHOICES:
        v.error("sequential.stage_size", f"must be one of {', '.join(STAGE_SIZE_CHOICES)}")
    elif stage_size == "planned" and information == "observed":
        v.error("sequential.stage_size", "planned stages are judged on their pairs: needs information: pairs")
    return SequentialRule(
        enabled=v.boolean(raw.get("enabled"), "sequential.enabled", True),
        looks=looks,
        stages_per_evaluation=per_evaluation,
        alpha_spending=spending,
        futility=futility,
        power=v.number(raw.get("power"), "sequential.power", 0.5, 0.99, 0.8),
        information=information,
        stage_size=stage_size,
    )


# ``extends: default@6``: a policy that differs from another in a few sections names it and its
# version; loading checks that version, so a change to the base (a new version) cannot change the
# extending policy's content without its own version bump.
EXTENDS = re.compile(r"(?P<name>[a-z][a-z0-9_-]*)@(?P<version>[1-9][0-9]*)")
MAX_EXTENDS_DEPTH = 3


def resolve_extends(document: Any, depth: int = 0) -> Any:
    """``document`` with its ``extends`` base merged under it: every top-level section the document
    gives replaces the base's, except mappings, which replace the base's keys one by one (a
    ``canary:`` with only ``interval_minutes`` keeps the base's other canary settings; a task under
    ``tasks:`` replaces that task's rules whole). Raises :class:`PolicyError` naming ``extends``."""
    if not isinstance(document, dict) or "extends" not in document:
        return document
    reference = document["extends"]
    match = EXTENDS.fullmatch(reference) if isinstance(reference, str) else None
    if match is None:
        raise PolicyError([("extends", "must name a policy and its version, like default@6")])
    if depth >= MAX_EXTENDS_DEPTH:
        raise PolicyError([("extends", f"policies extend each other more than {MAX_EXTENDS_DEPTH} deep")])
    path = POLICY_DIR / f"{match['name']}.yaml"
    try:
        base = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyError([("extends", f"cannot read the base policy {reference}: {exc}")]) from None
    base = resolve_extends(base, depth + 1)
    version = base.get("version") if isinstance(base, dict) else None
    if version != int(match["version"]):
        raise PolicyError(
            [
                (
                    "extends",
                    f"{reference}, but {match['name']} is version {version}: an extending policy pins its "
                    "base, so check what changed, then bump this policy's version and its extends",
                )
            ]
        )
    merged = copy.deepcopy(base)
    for key, value in document.items():
        if key == "extends":
            continue
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def policy_from_dict(document: Any, source: str | None = None) -> Policy:
    """Validate a parsed policy document (its ``extends`` base merged in first); raise
    :class:`PolicyError` listing every problem."""
    v = _Validator()
    try:
        return _policy(v, resolve_extends(document), source)
    except _TooManyErrors:
        raise PolicyError([*v.errors, ("", f"more problems not shown; fix these {len(v.errors)} first")]) from None


def _policy(v: _Validator, document: Any, source: str | None) -> Policy:
    top = {
        "name",
        "version",
        "dry_run",
        "description",
        "tasks",
        "mechanisms",
        "bottlenecks",
        "measurement",
        "evidence",
        "power_plan",
        "canary",
        "sequential",
        "stats",
    }
    raw = v.mapping(document, "", top, {"name", "version", "tasks"})
    if not raw:
        if not v.errors:
            v.error("", "policy document is empty")
        raise PolicyError(v.errors)
    name = raw.get("name")
    if not isinstance(name, str) or not POLICY_NAME.fullmatch(name):
        v.error("name", "must be a lower-case name (letters, digits, - and _)")
        name = "invalid"
    version = v.integer(raw.get("version"), "version", 1, 1)
    tasks: dict[str, TaskPolicy] = {}
    tasks_raw = raw.get("tasks")
    if not isinstance(tasks_raw, dict) or not tasks_raw:
        v.error("tasks", "must be a non-empty mapping of task type to rules")
        tasks_raw = {}
    for task, task_raw in tasks_raw.items():
        if not isinstance(task, str) or not TASK_NAME.fullmatch(task):
            v.error(f"tasks.{task}", "task type must be a snake_case name")
            continue
        tasks[task] = _task_policy(v, task, task_raw, f"tasks.{task}")
    speculative, prefix, quantization = _mechanisms(v, raw.get("mechanisms"), tasks)
    measurement_raw = v.mapping(raw.get("measurement") or {}, "measurement", {"max_delivery_shift_ms"})
    measurement = MeasurementRule(
        max_delivery_shift_ms=v.number(
            measurement_raw.get("max_delivery_shift_ms"), "measurement.max_delivery_shift_ms", 0, 60_000, 20.0
        )
    )
    evidence_raw = v.mapping(raw.get("evidence") or {}, "evidence", {"owner_imported"})
    owner_imported = v.string(evidence_raw.get("owner_imported"), "evidence.owner_imported", "inform")
    if owner_imported not in OWNER_IMPORTED_CHOICES:
        v.error("evidence.owner_imported", f"must be one of {', '.join(OWNER_IMPORTED_CHOICES)}")
    stats_raw = v.mapping(raw.get("stats") or {}, "stats", {"n_boot", "seed"})
    power_plan = _power_plan(v, raw.get("power_plan"))
    sequential = _sequential(v, raw.get("sequential"))
    policy = Policy(
        name=name,
        version=version,
        dry_run=v.boolean(raw.get("dry_run"), "dry_run", False),
        description=v.string(raw.get("description"), "description"),
        tasks=tasks,
        speculative_decoding=speculative,
        prefix_cache=prefix,
        quantization=quantization,
        bottlenecks=_bottlenecks(v, raw.get("bottlenecks")),
        measurement=measurement,
        evidence=EvidenceRule(owner_imported=owner_imported),
        power_plan=power_plan,
        canary=_canary(v, raw.get("canary")),
        sequential=sequential,
        n_boot=v.integer(stats_raw.get("n_boot"), "stats.n_boot", 100, 2000, high=MAX_N_BOOT),
        seed=v.integer(stats_raw.get("seed"), "stats.seed", 0, 0),
        source=source,
    )
    if v.errors:
        raise PolicyError(v.errors)
    return policy


def validate_policy_text(text: str, source: str | None = None) -> Policy:
    """Parse YAML (or JSON, a YAML subset) and validate it."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "document"
        raise PolicyError([("", f"not valid YAML at {where}: {getattr(exc, 'problem', exc)}")]) from exc
    except RecursionError:
        # PyYAML composes nested collections recursively; a policy is a few levels deep.
        raise PolicyError([("", "not a policy: the YAML is nested too deeply")]) from None
    return policy_from_dict(document, source=source)


def load_policy(path_or_name: str | Path) -> Policy:
    """Load a policy by file path, or by name from ``gates/policies/<name>.yaml``."""
    path = Path(path_or_name)
    if not path.suffix and not path.exists():
        path = POLICY_DIR / f"{path_or_name}.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError([("", f"cannot read policy {str(path_or_name)!r}: {exc.strerror}")]) from exc
    return validate_policy_text(text, source=str(path))


def list_policies(directory: Path | None = None) -> list[Policy]:
    """Every policy in ``directory`` (default ``gates/policies``), sorted by name and version.

    An invalid file raises: a broken policy in the repository should stop the deploy, not vanish.
    """
    folder = directory or POLICY_DIR
    policies = [load_policy(path) for path in sorted(folder.glob("*.yaml"))]
    return sorted(policies, key=lambda p: (p.name, p.version))
