"""Results in and out in the field's own formats: llm-d's Benchmark Report v0.2.1 (``llmd-benchmark-report``'s
own models validate every report written or read), and the peers' native outputs that library converts
(AIPerf, GuideLLM, inference-perf, ``vllm bench serve``) read as runs beside benchcamp's own.

``br_export``: a measured point -> a Benchmark Report. ``br_import``: a file -> :class:`Imported` (headline
figures under benchcamp's metric names, each with the definition the tool used, and a comparability key from what
the file states). ``track``: an :class:`Imported` logged to MLflow as a campaign run `benchcamp compare` reads.
"""
