"""Live canary analysis: the business-signal contract, Prometheus queries, and judging a round."""
