"""A real Slurm cluster on this one machine in a scratch folder, for the tests (Debian's slurm-wlm + munge; how it
runs is in ../shared/ECOSYSTEM-NOTES.md, "A real single-node Slurm for tests").

``start(folder)`` writes slurm.conf/gres.conf and starts munged, slurmctld and one slurmd per node, then waits
until every node is idle. The nodes (``ci0``, ``ci1``: NODES) are one host: each slurmd runs as its node
(``slurmd -N``) on its own port, with its own spool, pid and log (``%n``), all at NodeAddr 127.0.0.1, so that a
multi-node job (``--nodes=2``, an ``srun`` step per node) runs as on a real cluster, its nodes' engines on
loopback. Each node has two fake GPUs (character devices made with mknod, so that ``--gres=gpu:N`` sets
CUDA_VISIBLE_DEVICES). ``stop()`` cancels every job first (stopping slurmd with jobs running leaves slurmstepd
behind), then the daemons. Root only (SlurmUser=root, mknod): CI and the developers' machines run as root.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ["slurm-wlm", "munge"]
NODES = 2  # a 1P1D topology's two nodes (or a head and a --headless peer)
GPUS_PER_NODE = 2


def missing_reason() -> str | None:
    """Why no cluster can run here, or None."""
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (SlurmUser=root, mknod for the fake GPUs)"
    for tool in ("sbatch", "slurmctld", "slurmd", "munged", "mungekey"):
        if shutil.which(tool) is None:
            return f"{tool} not installed: run `make slurm` (apt-get install slurm-wlm munge)"
    return None


def install() -> str | None:
    """apt-get install the packages where they are missing (no service started: policy-rc.d); why not, or None."""
    if missing_reason() is None:
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return missing_reason()
    proc = subprocess.run(["make", "-s", "slurm"], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=600, check=False)
    return missing_reason() and f"{missing_reason()} ({(proc.stdout + proc.stderr).strip()[-300:]})"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    folder: Path
    host: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    procs: list[subprocess.Popen] = field(default_factory=list)
    nodes: list[str] = field(default_factory=lambda: [f"ci{i}" for i in range(NODES)])

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.folder / "slurm.conf")}

    def _conf(self) -> None:
        f = self.folder
        for d in ("state", "spool", "log", "munge", "dev"):
            (f / d).mkdir(parents=True, exist_ok=True)
        os.chmod(f / "munge", 0o711)
        for i in range(NODES * GPUS_PER_NODE):
            dev = f / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # like /dev/null: a char device Slurm accepts
        (f / "slurm.conf").write_text(
            "\n".join(
                [
                    "ClusterName=ci",
                    f"SlurmctldHost={self.host}",
                    "SlurmUser=root",
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={f}/munge/munge.socket",
                    f"StateSaveLocation={f}/state",
                    f"SlurmdSpoolDir={f}/spool/%n",  # %n: each node's slurmd its own
                    f"SlurmctldPidFile={f}/slurmctld.pid",
                    f"SlurmdPidFile={f}/slurmd-%n.pid",
                    f"SlurmctldLogFile={f}/log/slurmctld.log",
                    f"SlurmdLogFile={f}/log/slurmd-%n.log",
                    f"SlurmctldPort={_free_port()}",  # free ports: another cluster (or service) may hold Slurm's own
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/filetxt",
                    f"JobCompLoc={f}/log/jobcomp.txt",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    "SchedulerParameters=batch_sched_delay=0",
                    "SlurmdParameters=config_overrides",  # 8 CPUs declared on a 2-core box: more jobs fit
                    "ReturnToService=2",
                    "MinJobAge=30",
                    "KillWait=2",
                    "GresTypes=gpu",
                    # one host, a slurmd per node on its own port
                    *(
                        f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={_free_port()} CPUs=8 "
                        f"RealMemory=1000 Gres=gpu:fake:{GPUS_PER_NODE} State=UNKNOWN"
                        for n in self.nodes
                    ),
                    f"PartitionName=ci Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        (f / "gres.conf").write_text(
            "AutoDetect=off\n"
            + "".join(
                f"NodeName={n} Name=gpu Type=fake File={f}/dev/nvidia[{i * GPUS_PER_NODE}-{(i + 1) * GPUS_PER_NODE - 1}]\n"
                for i, n in enumerate(self.nodes)
            )
        )
        for n in self.nodes:
            (f / "spool" / n).mkdir(parents=True, exist_ok=True)

    def start(self, timeout_s: float = 30.0) -> Cluster:
        self._conf()
        f = self.folder
        key = f / "munge" / "munge.key"
        if not key.exists():
            subprocess.run(["mungekey", "--create", "--keyfile", str(key)], check=True, capture_output=True)
            os.chmod(key, 0o400)
        env = {**os.environ, **self.env}
        self.procs.append(
            subprocess.Popen(
                ["munged", "-F", "--force", f"--socket={f}/munge/munge.socket", f"--key-file={key}",
                 f"--pid-file={f}/munge/munged.pid", f"--log-file={f}/log/munged.log", f"--seed-file={f}/munge/seed"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )
        self._wait(lambda: (f / "munge" / "munge.socket").exists(), timeout_s, "munged")
        self.procs.append(subprocess.Popen(["slurmctld", "-D", "-c", "-i"], env=env, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL))
        self._wait(lambda: self.run("sinfo", "-h", check=False).returncode == 0, timeout_s, "slurmctld")
        for n in self.nodes:
            self.procs.append(subprocess.Popen(["slurmd", "-D", "-N", n], env=env, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL))
        self._wait(lambda: self.run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.split() == ["idle"] * NODES,
                   timeout_s, "slurmd")
        return self

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-1500:] for p in sorted((self.folder / "log").glob("*.log")))
                raise RuntimeError(f"{what} did not come up ({dead or 'timeout'}):\n{logs}")
            time.sleep(0.1)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env={**os.environ, **self.env}, cwd=self.folder, capture_output=True, text=True,
                              check=check, timeout=60)

    def hold_every_gpu(self, command: str) -> str:
        """Submit a job that holds every GPU of every node while ``command`` runs: what comes after it queues."""
        return self.run("sbatch", "--parsable", "--output=/dev/null", f"--nodes={NODES}",
                        f"--gres=gpu:{GPUS_PER_NODE}", "--wrap", command).stdout.strip()

    def jobs(self) -> list[str]:
        return self.run("squeue", "-h", "-o", "%i|%j|%T").stdout.split()

    def stop(self) -> None:
        self.run("scancel", "--full", "--user=root", check=False)
        deadline = time.monotonic() + 20
        while self.run("squeue", "-h", check=False).stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.2)
        for p in reversed(self.procs):  # every slurmd, slurmctld, munged
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        self.procs.clear()
