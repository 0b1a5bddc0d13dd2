"""Passage templates for the knowledge-assistant documents.

Each passage states two facts (slots) and is cited by an id such as ``[P07]``. Slot
values are drawn per document with a fixed seed and are unique within a document, so
an answer copied from the wrong passage is detectably wrong.
"""

from __future__ import annotations

import random
from collections.abc import Callable

# A passage: (title, text with two {slots}, [(slot, slot kind, question), ...]).
Passage = tuple[str, str, list[tuple[str, str, str]]]

TEAMS = ["Platform Ops", "Data Guild", "Blue Desk", "Core Infra", "Trust Office", "Atlas Team", "Night Shift"]
REGIONS = ["eu-north", "us-east", "ap-south", "eu-west", "us-west", "sa-east"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

SLOT_KINDS: dict[str, Callable[[random.Random], str]] = {
    "days": lambda r: f"{r.randint(7, 400)} days",
    "hours": lambda r: f"{r.randint(2, 96)} hours",
    "minutes": lambda r: f"{r.randint(5, 90)} minutes",
    "pct": lambda r: f"{r.randint(5, 95)} percent",
    "usd": lambda r: f"{r.randint(10, 990)} USD",
    "count": lambda r: str(r.randint(3, 60)),
    "team": lambda r: r.choice(TEAMS),
    "region": lambda r: r.choice(REGIONS),
    "weekday": lambda r: r.choice(WEEKDAYS),
    "clock": lambda r: f"{r.randint(0, 23):02d}:00 UTC",
}

# Filler sentences pad passages to a realistic length; they carry no answerable fact.
FILLER = [
    "This rule applies to every tenant and every environment unless a signed exception is on file.",
    "Changes to this section are announced in the monthly platform bulletin and take effect a week later.",
    "Teams should link this passage in their tickets instead of paraphrasing it in their own words.",
    "Earlier versions of this document used different numbers here, and those numbers no longer apply.",
    "Questions about this section go to the owning team through the usual request queue, not by chat.",
    "Auditors check this section every quarter, so exceptions must be written down before they are used.",
    "Automation enforces this rule where it can, and the weekly report lists every manual override.",
    "New staff read this section during onboarding and confirm it in the training portal.",
]

DOCUMENTS: dict[str, tuple[str, list[Passage]]] = {
    "storage": (
        "Northwind Cloud Storage Handbook",
        [
            (
                "Retention",
                "Deleted files stay in the recycle area for {a}. Version history is kept for {b}.",
                [
                    ("a", "days", "How long do deleted files stay in the recycle area?"),
                    ("b", "days", "How long is version history kept?"),
                ],
            ),
            (
                "Encryption",
                "Keys are rotated every {a}. The key service is run by the {b} team.",
                [
                    ("a", "days", "How often are encryption keys rotated?"),
                    ("b", "team", "Which team runs the key service?"),
                ],
            ),
            (
                "Backups",
                "Full backups start at {a} each night. A restore must finish within {b}.",
                [
                    ("a", "clock", "At what time do nightly full backups start?"),
                    ("b", "hours", "Within how long must a restore finish?"),
                ],
            ),
            (
                "Regions",
                "New buckets default to the {a} region. Replicas are placed in {b}.",
                [
                    ("a", "region", "Which region do new buckets default to?"),
                    ("b", "region", "Where are replicas placed?"),
                ],
            ),
            (
                "Quotas",
                "A standard project may hold {a} buckets. A quota alert fires at {b} of the limit.",
                [
                    ("a", "count", "How many buckets may a standard project hold?"),
                    ("b", "pct", "At what share of the limit does a quota alert fire?"),
                ],
            ),
            (
                "Sharing",
                "Public links expire after {a}. Link requests are reviewed by {b}.",
                [("a", "hours", "After how long do public links expire?"), ("b", "team", "Who reviews link requests?")],
            ),
            (
                "Maintenance",
                "Maintenance happens every {a}. Customers are warned {b} ahead.",
                [
                    ("a", "weekday", "On which weekday does maintenance happen?"),
                    ("b", "hours", "How far ahead are customers warned about maintenance?"),
                ],
            ),
            (
                "Audit logs",
                "Audit logs are kept for {a}. An export may take up to {b}.",
                [
                    ("a", "days", "How long are audit logs kept?"),
                    ("b", "minutes", "How long may an audit log export take?"),
                ],
            ),
            (
                "Support",
                "Severity one tickets get a reply within {a}. Escalations go to {b}.",
                [
                    ("a", "minutes", "How fast do severity one tickets get a reply?"),
                    ("b", "team", "Where do escalations go?"),
                ],
            ),
            (
                "Pricing",
                "Cold storage costs {a} per terabyte a month. Egress past the free tier costs {b} per terabyte.",
                [
                    ("a", "usd", "What does cold storage cost per terabyte a month?"),
                    ("b", "usd", "What does egress past the free tier cost per terabyte?"),
                ],
            ),
        ],
    ),
    "travel": (
        "Helios Travel and Expense Policy",
        [
            (
                "Hotels",
                "The nightly hotel cap is {a}. Bookings above the cap need sign-off from {b}.",
                [
                    ("a", "usd", "What is the nightly hotel cap?"),
                    ("b", "team", "Who signs off bookings above the hotel cap?"),
                ],
            ),
            (
                "Meals",
                "The daily meal allowance is {a}. Tips above {b} of the bill are not refunded.",
                [
                    ("a", "usd", "What is the daily meal allowance?"),
                    ("b", "pct", "Tips above what share of the bill are not refunded?"),
                ],
            ),
            (
                "Flights",
                "Economy is required for flights under {a}. Flights are booked at least {b} ahead.",
                [
                    ("a", "hours", "Economy is required for flights under what duration?"),
                    ("b", "days", "How far ahead are flights booked?"),
                ],
            ),
            (
                "Receipts",
                "Receipts must be filed within {a}. Claims without receipts are capped at {b}.",
                [
                    ("a", "days", "Within how long must receipts be filed?"),
                    ("b", "usd", "What is the cap for claims without receipts?"),
                ],
            ),
            (
                "Mileage",
                "Private cars are paid {a} per hundred kilometres. Trips over {b} kilometres need a rental.",
                [
                    ("a", "usd", "What are private cars paid per hundred kilometres?"),
                    ("b", "count", "Trips over how many kilometres need a rental?"),
                ],
            ),
            (
                "Approvals",
                "Trips abroad are approved by {a}. Approval must be requested {b} before departure.",
                [
                    ("a", "team", "Who approves trips abroad?"),
                    ("b", "days", "How long before departure must approval be requested?"),
                ],
            ),
            (
                "Advances",
                "A cash advance may cover up to {a} of the trip budget. Advances are paid out on {b}.",
                [
                    ("a", "pct", "Up to what share of the trip budget may a cash advance cover?"),
                    ("b", "weekday", "On which weekday are advances paid out?"),
                ],
            ),
            (
                "Conferences",
                "Staff may attend {a} paid conferences a year. Registration closes at {b} on deadline day.",
                [
                    ("a", "count", "How many paid conferences may staff attend a year?"),
                    ("b", "clock", "At what time does conference registration close on deadline day?"),
                ],
            ),
            (
                "Travel desk",
                "The travel desk answers calls within {a}. Changes after check-in go through {b}.",
                [
                    ("a", "minutes", "How fast does the travel desk answer calls?"),
                    ("b", "team", "Who handles changes after check-in?"),
                ],
            ),
            (
                "Reimbursement",
                "Approved claims are paid within {a}. Currency is converted at the rate of {b}.",
                [
                    ("a", "days", "Within how long are approved claims paid?"),
                    ("b", "weekday", "The rate of which weekday is used for currency conversion?"),
                ],
            ),
        ],
    ),
    "runbook": (
        "Orion Data Platform Runbook",
        [
            (
                "On-call",
                "The on-call rotation changes every {a}. The handover call starts at {b}.",
                [
                    ("a", "weekday", "On which weekday does the on-call rotation change?"),
                    ("b", "clock", "At what time does the handover call start?"),
                ],
            ),
            (
                "Severity",
                "A sev-1 page must be acknowledged within {a}. Sev-1 incidents are led by {b}.",
                [
                    ("a", "minutes", "Within how long must a sev-1 page be acknowledged?"),
                    ("b", "team", "Who leads sev-1 incidents?"),
                ],
            ),
            (
                "Restarts",
                "A stuck job is restarted after {a} without progress. At most {b} restarts are tried.",
                [
                    ("a", "minutes", "After how long without progress is a stuck job restarted?"),
                    ("b", "count", "How many restarts are tried at most?"),
                ],
            ),
            (
                "Capacity",
                "The cluster scales out at {a} CPU use. Scale-in waits {b} after load drops.",
                [
                    ("a", "pct", "At what CPU use does the cluster scale out?"),
                    ("b", "minutes", "How long does scale-in wait after load drops?"),
                ],
            ),
            (
                "Failover",
                "The primary database fails over to {a}. A failover drill runs every {b}.",
                [
                    ("a", "region", "Where does the primary database fail over to?"),
                    ("b", "days", "How often does a failover drill run?"),
                ],
            ),
            (
                "Freezes",
                "Deploys are frozen from {a} on release weeks. Freeze exceptions are granted by {b}.",
                [
                    ("a", "weekday", "From which weekday are deploys frozen on release weeks?"),
                    ("b", "team", "Who grants freeze exceptions?"),
                ],
            ),
            (
                "Backfills",
                "A backfill may use at most {a} workers. Backfills longer than {b} need a ticket.",
                [
                    ("a", "count", "How many workers may a backfill use at most?"),
                    ("b", "hours", "Backfills longer than what need a ticket?"),
                ],
            ),
            (
                "Alerts",
                "Disk alerts fire at {a} usage. Alert silences expire after {b}.",
                [
                    ("a", "pct", "At what usage do disk alerts fire?"),
                    ("b", "hours", "After how long do alert silences expire?"),
                ],
            ),
            (
                "Costs",
                "Idle clusters cost about {a} a day. Budgets are reviewed every {b}.",
                [
                    ("a", "usd", "What does an idle cluster cost a day?"),
                    ("b", "days", "How often are budgets reviewed?"),
                ],
            ),
            (
                "Postmortems",
                "A postmortem is due within {a} of a sev-1. Drafts are reviewed by {b}.",
                [
                    ("a", "days", "Within how long is a postmortem due after a sev-1?"),
                    ("b", "team", "Who reviews postmortem drafts?"),
                ],
            ),
        ],
    ),
    "security": (
        "Northwind Security Operations Handbook",
        [
            (
                "Passwords",
                "Service passwords expire after {a}. Password resets are approved by {b}.",
                [
                    ("a", "days", "After how long do service passwords expire?"),
                    ("b", "team", "Who approves password resets?"),
                ],
            ),
            (
                "Sessions",
                "Console sessions end after {a} of inactivity. A session may last at most {b}.",
                [
                    ("a", "minutes", "After how much inactivity do console sessions end?"),
                    ("b", "hours", "How long may a session last at most?"),
                ],
            ),
            (
                "Scanning",
                "Vulnerability scans run every {a}. Scan reports are stored in {b}.",
                [
                    ("a", "weekday", "On which weekday do vulnerability scans run?"),
                    ("b", "region", "Where are scan reports stored?"),
                ],
            ),
            (
                "Patching",
                "Critical patches are applied within {a}. A patch window may pause at most {b} hosts.",
                [
                    ("a", "hours", "Within how long are critical patches applied?"),
                    ("b", "count", "How many hosts may a patch window pause at most?"),
                ],
            ),
            (
                "Badges",
                "Lost badges are blocked within {a}. A replacement badge costs {b}.",
                [
                    ("a", "minutes", "Within how long are lost badges blocked?"),
                    ("b", "usd", "What does a replacement badge cost?"),
                ],
            ),
            (
                "Phishing",
                "Phishing drills reach {a} of staff each quarter. Reported emails are triaged by {b}.",
                [
                    ("a", "pct", "What share of staff do phishing drills reach each quarter?"),
                    ("b", "team", "Who triages reported emails?"),
                ],
            ),
            (
                "Logs",
                "Security logs are kept for {a}. Log exports run daily at {b}.",
                [
                    ("a", "days", "How long are security logs kept?"),
                    ("b", "clock", "At what time do log exports run?"),
                ],
            ),
            (
                "Vendors",
                "Vendor access is reviewed every {a}. Vendor accounts are limited to {b} per vendor.",
                [
                    ("a", "days", "How often is vendor access reviewed?"),
                    ("b", "count", "How many accounts may a vendor have?"),
                ],
            ),
            (
                "Incidents",
                "Data incidents are reported to the regulator within {a}. The incident room opens in {b}.",
                [
                    ("a", "hours", "Within how long are data incidents reported to the regulator?"),
                    ("b", "region", "Where does the incident room open?"),
                ],
            ),
            (
                "Audits",
                "Access audits start every {a}. Findings above {b} risk are escalated.",
                [
                    ("a", "weekday", "On which weekday do access audits start?"),
                    ("b", "pct", "Findings above what risk are escalated?"),
                ],
            ),
        ],
    ),
    "support": (
        "Northwind Customer Support Playbook",
        [
            (
                "Response",
                "Chats are answered within {a}. Emails are answered within {b}.",
                [
                    ("a", "minutes", "Within how long are chats answered?"),
                    ("b", "hours", "Within how long are emails answered?"),
                ],
            ),
            (
                "Refunds",
                "Agents may refund up to {a} without approval. Larger refunds go to {b}.",
                [
                    ("a", "usd", "How much may agents refund without approval?"),
                    ("b", "team", "Who handles larger refunds?"),
                ],
            ),
            (
                "Queues",
                "An agent holds at most {a} open chats. Overflow chats are routed to {b}.",
                [
                    ("a", "count", "How many open chats does an agent hold at most?"),
                    ("b", "region", "Where are overflow chats routed?"),
                ],
            ),
            (
                "Surveys",
                "Satisfaction surveys are sent {a} after a case closes. The survey goal is {b} satisfied.",
                [
                    ("a", "hours", "How long after a case closes are satisfaction surveys sent?"),
                    ("b", "pct", "What is the survey goal?"),
                ],
            ),
            (
                "Escalations",
                "Unresolved cases escalate after {a}. Escalated cases are owned by {b}.",
                [
                    ("a", "days", "After how long do unresolved cases escalate?"),
                    ("b", "team", "Who owns escalated cases?"),
                ],
            ),
            (
                "Shifts",
                "The late shift starts at {a}. Shift swaps are posted by {b}.",
                [
                    ("a", "clock", "At what time does the late shift start?"),
                    ("b", "weekday", "By which weekday are shift swaps posted?"),
                ],
            ),
            (
                "Credits",
                "Outage credits cover {a} of the monthly fee. Credit requests expire after {b}.",
                [
                    ("a", "pct", "What share of the monthly fee do outage credits cover?"),
                    ("b", "days", "After how long do credit requests expire?"),
                ],
            ),
            (
                "Training",
                "New agents shadow calls for {a}. Refresher training runs every {b}.",
                [
                    ("a", "hours", "For how long do new agents shadow calls?"),
                    ("b", "days", "How often does refresher training run?"),
                ],
            ),
            (
                "Callbacks",
                "Callbacks are scheduled within {a}. A case allows at most {b} callbacks.",
                [
                    ("a", "minutes", "Within how long are callbacks scheduled?"),
                    ("b", "count", "How many callbacks does a case allow?"),
                ],
            ),
            (
                "Closures",
                "Quiet cases close automatically after {a}. Closure reports are sent every {b}.",
                [
                    ("a", "days", "After how long do quiet cases close automatically?"),
                    ("b", "weekday", "On which weekday are closure reports sent?"),
                ],
            ),
        ],
    ),
}
