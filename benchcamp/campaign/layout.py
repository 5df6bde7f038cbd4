"""Every location of one execution in the results store, named in one place.

```
<campaign>/<execution_id>/            the execution (``base``)
    campaign.json  summary.json       summarize: everything / headline + points
    engine.log                        stop_engine (secrets redacted)
    <label>/                          a sweep point (c8, r2.5, t1): records.parquet, point.json, summary.json
    <label>/trial-<k>/                load.trials > 1: trial k of the point (records.parquet, point.json,
                                      summary.json); the point's own summary.json is the trials' aggregate
    errors/<step>.json                a step's failure (kinds.Step), blanked by its retry
    report/  report/verdicts.json     evaluate
    benchmark_report/<label>.br.json  track, with tracking.benchmark_report (llm-d's Benchmark Report v0.2.1)
<campaign>/latest                     the newest execution's id (a pointer file)
workloads/<digest>.parquet            prepare_workload: the workload, by content
```
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from benchcamp.campaign.kinds import Step
from benchcamp.provision.base import safe_name

WORKLOADS = "workloads"
LATEST = "latest"


@dataclass(frozen=True)
class StoreLayout:
    campaign: str
    execution_id: str
    base: str = ""  # the execution's folder; "" = the store's root (bench run --out DIR)

    @classmethod
    def for_execution(cls, campaign: str, execution_id: str) -> StoreLayout:
        return cls(campaign, execution_id, f"{safe_name(campaign)}/{safe_name(execution_id)}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StoreLayout:
        return cls(**data)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    def _in(self, *parts: str) -> str:
        return "/".join(p for p in (self.base, *parts) if p)

    @property
    def execution(self) -> str:
        return self.base

    def point(self, label: str) -> str:
        return self._in(label)

    def point_json(self, label: str) -> str:
        return self._in(label, "point.json")

    def measurement(self, label: str, trial: int, trials: int) -> str:
        """Where one measurement of a point goes: the point's folder, or (``trials`` > 1) trial ``trial``'s."""
        from benchcamp.results.trials import trial_name

        return self._in(label, trial_name(trial)) if trials > 1 else self._in(label)

    def shard(self, label: str, index: int) -> str:
        """One load-generator shard's part of a point (benchcamp.loadgen.shards): its records and point.json."""
        return self._in(label, f"shard-{index}")

    def shard_ready(self, label: str, index: int) -> str:
        return self._in(label, f"shard-{index}.ready.json")

    def shard_quit(self, index: int) -> str:
        """A shard that gave up on the sweep says why here: the others stop waiting for it."""
        return self._in("shards", f"quit-{index}.txt")

    def records(self, label: str) -> str:
        return self._in(label, "records.parquet")

    @property
    def campaign_json(self) -> str:
        return self._in("campaign.json")

    @property
    def summary_json(self) -> str:
        return self._in("summary.json")

    @property
    def engine_log(self) -> str:
        return self._in("engine.log")

    @property
    def errors(self) -> str:
        return self._in("errors")

    def error(self, step: Step | str) -> str:
        return self._in("errors", f"{Step(step).value}.json")

    @property
    def report(self) -> str:
        return self._in("report")

    @property
    def capacity(self) -> str:
        """The capacity search's result (load.mode=capacity): tiers, probes, settings."""
        return self._in("capacity.json")

    @property
    def benchmark_reports(self) -> str:
        """Each point as llm-d's Benchmark Report (tracking.benchmark_report): ``<point>.br.json``."""
        return self._in("benchmark_report")

    @property
    def verdicts(self) -> str:
        return self._in("report", "verdicts.json")

    @property
    def latest(self) -> str | None:
        """``<campaign>/latest``; None when the execution is the store's root."""
        return f"{safe_name(self.campaign)}/{LATEST}" if self.base else None

    @staticmethod
    def workload(digest: str) -> str:
        return f"{WORKLOADS}/{digest}.parquet"
