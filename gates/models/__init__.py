"""The gates app's models, one module per part of the domain; imported here so Django finds them."""

from gates.models.calibrations import Calibration, CalibrationStatus
from gates.models.canary import CanaryRound, OutcomeCount, RoundAction, RoundVerdict
from gates.models.decisions import (
    DecisionOutcome,
    EvidenceAcceptance,
    GateDecision,
    ReasonCode,
    ReviewerCapacity,
    SignOff,
    SignOffVerdict,
)
from gates.models.notifications import GithubCallback, GithubCallbackAttempt, Notification, NotificationAttempt
from gates.models.reviews import Review, ReviewOutcome, ReviewReason, ReviewStatus
from gates.models.routes import Route, RouteTableVersion
from gates.models.stages import EvaluationStage
from gates.models.tickets import (
    TRANSITIONS,
    Bottleneck,
    IllegalTransition,
    Mechanism,
    ReleaseTicket,
    RiskTier,
    TaskType,
    TicketStatus,
    allowed_actions,
)

__all__ = [
    "TRANSITIONS",
    "Bottleneck",
    "Calibration",
    "CalibrationStatus",
    "CanaryRound",
    "DecisionOutcome",
    "EvaluationStage",
    "EvidenceAcceptance",
    "GateDecision",
    "GithubCallback",
    "GithubCallbackAttempt",
    "IllegalTransition",
    "Mechanism",
    "Notification",
    "NotificationAttempt",
    "OutcomeCount",
    "ReasonCode",
    "ReleaseTicket",
    "Review",
    "ReviewOutcome",
    "ReviewReason",
    "ReviewStatus",
    "ReviewerCapacity",
    "RiskTier",
    "RoundAction",
    "RoundVerdict",
    "Route",
    "RouteTableVersion",
    "SignOff",
    "SignOffVerdict",
    "TaskType",
    "TicketStatus",
    "allowed_actions",
]
