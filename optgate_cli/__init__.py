"""``optgate``: the CI client. Talks to an OptGate server over its REST API only (no Django here).

    optgate gate ticket.yaml            # register backends, file, evaluate, wait, print, exit by verdict
    optgate file ticket.yaml            # file only; prints the ticket id
    optgate wait TICKET_ID              # wait for a filed ticket's verdict
    optgate decision TICKET_ID          # print the current decision and exit by it (no waiting)
    optgate routes export --format litellm
    optgate evidence open BACKEND --task T [--task T2]
    optgate evidence import RUN_ID --task T (--vllm-bench FILE | --lm-eval-results FILE [--lm-eval-samples FILE])
    optgate evidence close RUN_ID

The exit code is the verdict, so a CI step can branch on it (see ``EXIT_CODES``).
"""
