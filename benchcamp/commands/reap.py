"""`benchcamp reap`: terminate benchcamp EC2 nodes past their expiry tag; with provider.kind=slurm, cancel the
executions' Slurm jobs that expired (their time limit hit, or past their expiry) and kill what they left behind."""

from __future__ import annotations

import argparse

from benchcamp.commands.common import add_config_args, config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reap", help="terminate expired benchcamp-tagged EC2 nodes (provider.kind=slurm: expired Slurm jobs)"
    )
    add_config_args(p)
    p.add_argument("--dry-run", action="store_true", help="list what would be terminated, terminate nothing")
    p.add_argument("--region", help="AWS region (default: provider.ec2.region)")
    p.set_defaults(func=_reap)


def _reap(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if cfg.provider.kind == "slurm":
        return _reap_slurm(cfg, args.dry_run)
    import boto3

    from benchcamp.provision.reaper import reap

    region = args.region or cfg.provider.ec2.region
    found = reap(boto3.client("ec2", region_name=region), dry_run=args.dry_run)
    verb = "would terminate" if args.dry_run else "terminated"
    for r in found:
        print(f"{verb} {r.instance_id} ({r.state}; execution {r.execution_id}; expired {r.expires_at})")
    if not found:
        print(f"no expired benchcamp nodes in {region}")
    return 0


def _reap_slurm(cfg, dry_run: bool) -> int:
    from benchcamp.deploy.slurm_job import SlurmEngineJob
    from benchcamp.provision.slurm import env_folder, reap

    found = reap(cfg, boot=SlurmEngineJob(cfg), dry_run=dry_run)
    verb = "would reap" if dry_run else "reaped"
    for r in found:
        print(f"{verb} Slurm job {r.job_id} ({r.state}; execution {r.execution_id}; expires {r.expires_at})")
    if not found:
        print(f"no expired benchcamp Slurm jobs in {env_folder(cfg)}")
    return 0
