"""The REST API under /api/v1/ for tickets, decisions, policies, routes and runs, and the rollout integrations."""
