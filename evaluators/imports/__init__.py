"""Evidence import: attach results measured outside OptGate to an evaluation run.

Two producers are understood:

* ``vllm bench serve`` result JSON (``--save-result``; ``--save-detailed`` adds the per-request
  arrays the judge needs for its latency tests). It becomes a task's ``performance`` aggregates and
  raw ``requests`` records, in exactly the shape our own load generator stores.
* lm-evaluation-harness results JSON plus its ``--log_samples`` samples (JSONL, or the in-memory
  ``samples`` list) for one OptGate suite task. Every sample's output is re-scored with the suite's
  own scorer, as native runs do, and stored as ``SampleRecord`` rows.

A file whose model or configuration does not match the run's backend is refused with an
``InvalidInput`` naming the offending field (HTTP 400): the model id / tokenizer path of a bench
file, the served model name of an lm-eval file, its suite version, the benchmark's concurrency
against the run's load profile.

Import runs: ``run_open_for_import`` creates a run in ``running`` (phase "importing evidence")
with no deadline, so neither the sweeper nor a worker ever executes it; ``run_close_import`` moves
it to ``succeeded`` and only then gives it the same reuse key a native run of that backend and
load profile would have, so a later evaluation request can reuse the imported evidence.
"""
