"""Load generator workers must not import pandas: it costs each new worker process seconds."""

from __future__ import annotations

import subprocess
import sys


def test_worker_and_records_modules_do_not_import_pandas(tmp_path):
    code = (
        "import sys\n"
        "import benchcamp.loadgen.worker, benchcamp.results.records as r\n"
        "assert 'pandas' not in sys.modules, 'pandas imported at module load'\n"
        f"r.write_records([r.empty_record(point='c1', turn=3)], {str(tmp_path / 'x.parquet')!r})\n"
        f"df = r.read_records({str(tmp_path / 'x.parquet')!r})\n"
        "assert type(df).__name__ == 'DataFrame' and df['turn'].tolist() == [3]\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
