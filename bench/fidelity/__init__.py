"""The simulator's fidelity against published real-hardware results: the corpus (``corpus/*.yaml``) and the
scripts over it: ``replay`` (the report), ``fit`` (profile factor searches on the fit set), ``import_gpustack`` and
``import_inferencex`` (corpus points from those sources). The corpus loader and the replay of one point are
``bench.common.fidelity``; the report's outputs are under ``bench/results/fidelity/``."""
