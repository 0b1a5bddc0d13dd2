"""Fill a database with a realistic volume of tickets, decisions and ledger entries for benchmarks.

Not a write path of the product: it bypasses the services on purpose (one service call per row
would take hours for a million entries) and inserts rows in large batches — PostgreSQL's COPY
through psycopg 3, ``bulk_create`` elsewhere. The ledger entries are hashed with the ledger's
own ``entry_hash`` and chained from the current head, which is moved to the last entry, so
``manage.py ledger_verify`` passes afterwards.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth.models import Group, User
from django.db.models import Max

from backends.models import Backend
from evaluators.models import EvaluationRun, RunStatus
from gates.models import (
    TRANSITIONS,
    Bottleneck,
    DecisionOutcome,
    GateDecision,
    Mechanism,
    ReleaseTicket,
    SignOff,
    TaskType,
    TicketStatus,
)
from ledger.models import LedgerEntry, LedgerHead, entry_hash
from tools.bulk_rows import insert, insert_entries, next_id, take

S = TicketStatus
# Share of tickets per status: most are finished, a few are in flight.
STATUS_WEIGHTS = {
    S.DRAFT: 8,
    S.SUBMITTED: 3,
    S.EVALUATING: 4,
    S.EVALUATED: 10,
    S.NEEDS_EVIDENCE: 5,
    S.APPROVED: 6,
    S.RESTRICTED: 4,
    S.REJECTED: 20,
    S.CANARY: 5,
    S.DEFAULT: 20,
    S.ROLLED_BACK: 5,
    S.RETIRED: 10,
}
# The path each status was reached by; its length decides the ticket's lifecycle ledger entries.
PATHS: dict[str, tuple[str, ...]] = {
    S.DRAFT: (),
    S.SUBMITTED: ("submit",),
    S.EVALUATING: ("submit", "start_evaluation"),
    S.EVALUATED: ("submit", "start_evaluation", "finish_evaluation"),
    S.NEEDS_EVIDENCE: ("submit", "start_evaluation", "finish_evaluation", "request_evidence"),
    S.APPROVED: ("submit", "start_evaluation", "finish_evaluation", "approve"),
    S.RESTRICTED: ("submit", "start_evaluation", "finish_evaluation", "restrict"),
    S.REJECTED: ("submit", "start_evaluation", "finish_evaluation", "reject"),
    S.CANARY: ("submit", "start_evaluation", "finish_evaluation", "approve", "start_canary"),
    S.DEFAULT: ("submit", "start_evaluation", "finish_evaluation", "approve", "start_canary", "promote"),
    S.ROLLED_BACK: ("submit", "start_evaluation", "finish_evaluation", "restrict", "start_canary", "roll_back"),
    S.RETIRED: ("submit", "start_evaluation", "finish_evaluation", "approve", "start_canary", "promote", "retire"),
}
OUTCOME_OF_SIGNED = {
    "approve": DecisionOutcome.APPROVE,
    "restrict": DecisionOutcome.RESTRICT,
    "reject": DecisionOutcome.REJECT,
}
MECHANISMS_BY_BOTTLENECK = {
    Bottleneck.PREFILL: [Mechanism.PREFIX_CACHE, Mechanism.CONTEXT_LIMIT],
    Bottleneck.DECODE: [Mechanism.SPECULATIVE_DECODING, Mechanism.WEIGHT_QUANTIZATION],
    Bottleneck.KV_MEMORY: [Mechanism.KV_CACHE_QUANTIZATION, Mechanism.KV_CACHE_MANAGEMENT],
    Bottleneck.QUEUEING: [Mechanism.BATCHING, Mechanism.PARALLELISM],
    Bottleneck.STRUCTURED_OUTPUT: [Mechanism.WEIGHT_QUANTIZATION, Mechanism.BATCHING],
}
BACKEND_VARIANTS: list[dict[str, Any]] = [
    {},
    {"enable_prefix_caching": True},
    {"kv_cache_dtype": "fp8"},
    {"quantization": "awq"},
    {"max_num_seqs": 512},
    {"max_num_batched_tokens": 16384},
    {"tensor_parallel_size": 2},
    {"speculative_config": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}},
]
SPAN = timedelta(days=730)  # tickets and ledger entries spread over two years


class Seeder:
    def __init__(self, rng: random.Random, batch: int, say: Any) -> None:
        self.rng, self.batch, self.say = rng, batch, say
        self.counts = {"tickets": 0, "decisions": 0, "sign_offs": 0, "entries": 0}
        self.tasks = list(TaskType.objects.order_by("slug"))
        self.now = datetime.now(UTC).replace(microsecond=0)
        self.seeded: list[tuple[int, str, str, str]] = []  # (ticket id, title, status, owner) for the ledger

    # --- the cast, backends and the runs decisions refer to -------------------------------------

    def _users(self, prefix: str, count: int, role: str) -> list[User]:
        group = Group.objects.get_or_create(name=role)[0]
        names = [f"{prefix}{i:02d}" for i in range(count)]
        existing = {u.username for u in User.objects.filter(username__in=names)}
        created = User.objects.bulk_create(
            User(username=name, email=f"{name}@bench.example", password="!bench-seed")
            for name in names
            if name not in existing
        )
        User.groups.through.objects.bulk_create(
            [User.groups.through(user_id=u.pk, group_id=group.pk) for u in created], ignore_conflicts=True
        )
        return list(User.objects.filter(username__in=names).order_by("username"))

    def _backends(self, owner: User) -> list[tuple[Backend, EvaluationRun]]:
        pairs = []
        for index, engine_args in enumerate(BACKEND_VARIANTS):
            backend = Backend(
                name=f"bench-backend-{index}",
                model_id="optgate/bench-model",
                model_path="/models/bench-model",
                model_revision="sha256:" + f"{index:02d}" * 32,
                engine_version="0.11.0",
                hardware_class="h100-80g",
                engine_args={"max_model_len": 8192, **engine_args},
                sampling_params={"temperature": 0.0},
                model_card={"quantization_method": engine_args.get("quantization", "none"), "allowed_tasks": []},
                created_by=owner,
            )
            backend.fingerprint = backend.compute_fingerprint()
            existing = Backend.objects.filter(fingerprint=backend.fingerprint).first()
            if existing is None:
                backend.save()
            else:
                backend = existing
            run = EvaluationRun.objects.filter(backend=backend, status=RunStatus.SUCCEEDED).first()
            if run is None:
                run = EvaluationRun.objects.create(
                    backend=backend,
                    tasks=[t.slug for t in self.tasks],
                    engine_version="0.11.0",
                    hardware_class="h100-80g",
                    reuse_key=f"bench-{backend.fingerprint[:32]}",
                    status=RunStatus.SUCCEEDED,
                    progress=100,
                )
            pairs.append((backend, run))
        return pairs

    # --- tickets with their decisions and sign-offs ---------------------------------------------

    def seed_tickets(self, count: int) -> None:
        engineers = self._users("bench-engineer-", 40, "engineer")
        reviewers = self._users("bench-reviewer-", 12, "reviewer")
        backends = self._backends(engineers[0])
        ticket_id, decision_id, sign_off_id = next_id(ReleaseTicket), next_id(GateDecision), next_id(SignOff)
        statuses, weights = list(STATUS_WEIGHTS), list(STATUS_WEIGHTS.values())
        Beneficiary = ReleaseTicket.beneficiary_tasks.through
        Risk = ReleaseTicket.risk_tasks.through
        started = time.monotonic()
        for start in range(0, count, self.batch):
            tickets: list[ReleaseTicket] = []
            beneficiary: list[Any] = []
            risk: list[Any] = []
            decisions: list[GateDecision] = []
            sign_offs: list[SignOff] = []
            for offset in range(min(self.batch, count - start)):
                rng = self.rng
                status = rng.choices(statuses, weights)[0]
                created = self.now - SPAN + SPAN * (start + offset) / max(count, 1)
                (base, base_run), (cand, cand_run) = rng.sample(backends, 2)
                owner = rng.choice(engineers)
                chosen = rng.sample(self.tasks, rng.randint(1, 3))
                bottleneck = rng.choice(list(MECHANISMS_BY_BOTTLENECK))
                mechanism = rng.choice(MECHANISMS_BY_BOTTLENECK[bottleneck])
                title = f"{mechanism.replace('_', ' ').capitalize()} for {chosen[0].slug} ({cand.name}) #{ticket_id}"
                path = PATHS[status]
                ticket = ReleaseTicket(
                    id=ticket_id,
                    title=title,
                    description="Benchmark ticket seeded by bench_seed.",
                    mechanisms=[mechanism],
                    bottleneck=bottleneck,
                    bottleneck_evidence=f"{bottleneck} dominates: p95 {rng.randint(200, 4000)} ms on production traces",
                    baseline=base,
                    candidate=cand,
                    rollback_target=base,
                    benefit_metrics=["ttft_p95", "output_throughput"],
                    guardrail_metrics=["pass_rate"],
                    rollback_plan={
                        "sacrifices": "the latency gain",
                        "warmup": "none: baseline stays loaded",
                        "inflight_streams": "finish on the candidate",
                        "route_update": f"{chosen[0].slug} back to {base.name}",
                    },
                    observation_window_hours=rng.choice([24, 72, 168]),
                    canary_scope={"tenants": [f"tenant-{rng.randint(1, 40)}"], "business_domain": "support"},
                    owner=owner,
                    status=status,
                    created_at=created,
                    updated_at=created + timedelta(hours=len(path)),
                    submitted_at=created + timedelta(minutes=5) if path else None,
                    decided_at=created + timedelta(hours=3)
                    if status in {S.APPROVED, S.RESTRICTED, S.REJECTED, S.CANARY, S.DEFAULT, S.ROLLED_BACK}
                    else None,
                    closed_at=created + timedelta(days=9) if status in {S.REJECTED, S.RETIRED} else None,
                    baseline_run=base_run if len(path) >= 3 else None,
                    candidate_run=cand_run if len(path) >= 3 else None,
                )
                tickets.append(ticket)
                beneficiary.append(Beneficiary(releaseticket_id=ticket_id, tasktype_id=chosen[0].pk))
                risk.extend(Risk(releaseticket_id=ticket_id, tasktype_id=t.pk) for t in chosen[1:])
                if len(path) >= 3:
                    signed = next((a for a in path if a in OUTCOME_OF_SIGNED), "")
                    decision = self._decision(decision_id, ticket, base_run, cand_run, chosen, signed, path)
                    decisions.append(decision)
                    if signed:
                        sign_offs.append(
                            SignOff(
                                id=sign_off_id,
                                ticket=ticket,
                                decision=decision,
                                reviewer=rng.choice(reviewers),
                                capacity="platform",
                                verdict=signed,
                                tasks=decision.signed_tasks,
                                reason_code="evidence_sufficient" if signed != "reject" else "guardrail_regression",
                                comment="checked the failing samples side by side",
                                created_at=decision.created_at,
                            )
                        )
                        sign_off_id += 1
                    decision_id += 1
                self.seeded.append((ticket_id, title, status, owner.username))
                ticket_id += 1
            insert(ReleaseTicket, tickets)
            insert(Beneficiary, beneficiary)
            insert(Risk, risk)
            insert(GateDecision, decisions)
            insert(SignOff, sign_offs)
            self.counts["tickets"] += len(tickets)
            self.counts["decisions"] += len(decisions)
            self.counts["sign_offs"] += len(sign_offs)
        if count:
            self.say(f"  tickets: {count} in {time.monotonic() - started:.1f} s")

    def _decision(
        self,
        pk: int,
        ticket: ReleaseTicket,
        base_run: EvaluationRun,
        cand_run: EvaluationRun,
        chosen: list[TaskType],
        signed: str,
        path: Sequence[str],
    ) -> GateDecision:
        slugs = [t.slug for t in chosen]
        outcome = OUTCOME_OF_SIGNED.get(
            signed, DecisionOutcome.NEEDS_EVIDENCE if "request_evidence" in path else DecisionOutcome.APPROVE
        )
        allowed = slugs[:1] if outcome == DecisionOutcome.RESTRICT else ([] if outcome == "reject" else slugs)
        verdicts = {
            slug: {
                "task": slug,
                "metric": "pass_rate",
                "kind": "quality",
                "n": 200,
                "status": "pass" if slug in allowed else ("inconclusive" if outcome == "needs_evidence" else "fail"),
                "baseline": 0.91,
                "candidate": round(self.rng.uniform(0.84, 0.93), 3),
                "test": "mcnemar",
                "reason": "paired exact test on discordant samples against a 2-point margin",
            }
            for slug in slugs
        }
        decided_at = ticket.created_at + timedelta(hours=2)
        return GateDecision(
            id=pk,
            ticket=ticket,
            policy_version="default@1",
            baseline_run=base_run,
            candidate_run=cand_run,
            outcome=outcome,
            verdicts=verdicts,
            reasons=[f"{slug}: {v['status']}" for slug, v in verdicts.items()],
            proposed_routes={slug: "candidate" if slug in allowed else "baseline" for slug in slugs},
            allowed_tasks=allowed,
            samples_needed={slugs[0]: 120} if outcome == "needs_evidence" else {},
            created_at=decided_at,
            signed_verdict=signed,
            signed_tasks=allowed if signed else [],
            signed_at=decided_at + timedelta(hours=1) if signed else None,
        )

    # --- the ledger -----------------------------------------------------------------------------

    def _ledger_content(self, count: int) -> Iterator[tuple[str, str, str, str, str, dict[str, Any]]]:
        """(kind, subject type, subject id, subject name, actor, payload): each seeded ticket's
        lifecycle first, then periodic reviews of the tickets in turn until ``count`` is reached."""
        produced = 0
        for ticket_id, title, status, owner in self.seeded:
            steps: list[tuple[str, dict[str, Any]]] = [("ticket.filed", {"status": "draft", "title": title})]
            current = "draft"
            for action in PATHS[status]:
                target = TRANSITIONS[action][1]
                reason = "guardrail broken on a risk task" if action == "reject" else ""
                steps.append((f"ticket.{target}", {"action": action, "from": current, "to": target, "reason": reason}))
                current = target
            for kind, payload in steps:
                if produced == count:
                    return
                yield kind, "ticket", str(ticket_id), title, owner, payload
                produced += 1
        round_ = 0
        subjects = self.seeded or [(0, "fleet", "default", "system")]
        while produced < count:
            round_ += 1
            for ticket_id, title, _, _ in subjects:
                if produced == count:
                    return
                outcome = self.rng.choice(["keep_default", "observe_more", "restrict", "rollback"])
                payload = {"quarter": round_, "outcome": outcome, "notes": "quarterly review of the optimization"}
                yield "review.recorded", "ticket", str(ticket_id), title, "bench-reviewer-00", payload
                produced += 1

    def seed_ledger(self, count: int) -> None:
        head, _ = LedgerHead.objects.select_for_update().get_or_create(id=1)
        seq, prev_hash, entry_id = head.seq, head.hash or LedgerEntry.GENESIS_HASH, next_id(LedgerEntry)
        last = LedgerEntry.objects.aggregate(last=Max("created_at"))["last"]
        start_at = max(self.now - SPAN, last or self.now - SPAN)
        step = SPAN / max(count, 1)
        started = time.monotonic()
        content = self._ledger_content(count)
        while True:
            rows: list[tuple[Any, ...]] = []
            for kind, subject_type, subject_id, name, actor, payload in take(content, self.batch):
                seq += 1
                created_at = start_at + step * (seq - head.seq)
                # The ledger's own hash function over what ``ledger_append`` would store.
                digest = entry_hash(
                    seq=seq,
                    kind=kind,
                    subject_type=subject_type,
                    subject_id=subject_id,
                    subject_name=name,
                    actor_name=actor,
                    payload=payload,
                    created_at=created_at,
                    prev_hash=prev_hash,
                )
                rows.append(
                    (
                        entry_id,
                        seq,
                        kind,
                        subject_type,
                        subject_id,
                        name,
                        None,
                        actor,
                        payload,
                        created_at,
                        prev_hash,
                        digest,
                    )
                )
                prev_hash = digest
                entry_id += 1
            if not rows:
                break
            insert_entries(rows)
            self.counts["entries"] += len(rows)
        LedgerHead.objects.filter(id=1).update(seq=seq, hash=prev_hash if seq else "")
        if count:
            self.say(f"  ledger: {count} entries in {time.monotonic() - started:.1f} s")
