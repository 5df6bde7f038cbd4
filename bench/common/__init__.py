"""What the bench/ scripts share (imported as ``bench.common.<module>``; nothing here is a script):

- ``paths``: the repository root, where outputs go (``bench/results/<script>/``), the peers' cache.
- ``servers``: the simulated or the real engine as a subprocess (its own process group, readiness,
  a free port, its log), an endpoint given to a script, the server's /metrics counters.
- ``peers``: the other clients' pinned installs in their own venvs (AIPerf, GuideLLM,
  agentperf-local) and what they need offline (a word tokenizer, tiktoken's o200k_base).
- ``runs``: one benchcamp load point over HTTP, the benchcamp CLI, AIPerf's ``profile``, each as
  a run with its records, wall time and the server's cache delta.
- ``stats``: per-request statistics computed the same way for every client's records.
- ``tables``: the one table printer (text or Markdown), with ratios.
- ``plots``: the one bar / point plot writer (side-by-side ratios, grouped and stacked bars).
- ``fidelity``: the published-results corpus and its replay on the virtual clock
  (``bench.fidelity.replay`` and ``bench.fidelity.fit`` run it).
"""
