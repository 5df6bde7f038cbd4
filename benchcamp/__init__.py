"""benchcamp: reproducible benchmark campaigns for LLM serving."""

from benchcamp import native as _native

_native.install()  # the compiled simulator, where a fresh build exists (benchcamp/native.py)
