"""Sub-agents: the ``task`` tool, child runs and their bounded results (SPEC X-3, X-4, K-2, F-1)."""
