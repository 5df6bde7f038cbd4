"""benchcamp: reproducible benchmark campaigns for LLM serving."""

from benchcamp.sim import native as _native

_native.install()  # the compiled simulator, where a fresh build exists (benchcamp/sim/native.py)
