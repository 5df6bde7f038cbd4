"""EC2 retry recovery against moto, with EC2's client-token answer injected.

moto launches real (mock) instances but ignores ``ClientToken`` and its listings
never lag. ``Ec2Quirks`` adds those two EC2 behaviours on botocore's event hooks
(so paginated calls go through them too): a reused token answers
``IdempotentParameterMismatch`` (the retry's user data holds a new key), and
lookups by tag or type miss the instance for the first N calls (eventual
consistency right after a launch).
"""

from __future__ import annotations

import pytest
from botocore.awsrequest import AWSResponse

from benchcamp.config import load_config
from benchcamp.deploy.remote import node_boot
from benchcamp.provision import ProvisionError, get_provider
from benchcamp.provision.ec2 import TOKEN_IN_USE, Ec2Provider, client_token

REGION = "us-east-1"
MOTO_AMI = "ami-12c6146b"


class Ec2Quirks:
    """Injects EC2's client-token idempotency and listing lag into a moto-backed client."""

    def __init__(self, client, hide_listings: int = 0):
        self.hide_listings = hide_listings  # describe_instances calls that miss every instance
        self.used_tokens: set[str] = set()  # tokens of launches moto really made
        self.launches: list[str] = []       # ClientToken of every run_instances call
        self.mismatches = 0
        ev = client.meta.events
        ev.register("provide-client-params.ec2.RunInstances", self._note_token)
        ev.register("before-call.ec2.RunInstances", self._maybe_mismatch)
        ev.register("after-call.ec2.RunInstances", self._remember_token)
        ev.register("after-call.ec2.DescribeInstances", self._lag)

    def _note_token(self, params, context, **_):
        context["quirk_token"] = params.get("ClientToken")
        self.launches.append(params.get("ClientToken"))

    def _maybe_mismatch(self, context, **_):
        if context.get("quirk_token") in self.used_tokens:
            self.mismatches += 1
            return AWSResponse(None, 400, {}, None), {
                "Error": {"Code": TOKEN_IN_USE, "Message": "The client token you have provided is associated "
                          "with a resource that is already deleted or has different parameters (injected)"},
                "ResponseMetadata": {"HTTPStatusCode": 400}}
        return None

    def _remember_token(self, parsed, context, **_):
        if context.get("quirk_token"):
            self.used_tokens.add(context["quirk_token"])

    def _lag(self, parsed, **_):
        if self.hide_listings > 0:
            self.hide_listings -= 1
            parsed["Reservations"] = []


def _cfg(**over):
    base = {"provider.kind": "ec2", "provider.ec2.ami_id": MOTO_AMI, "provider.ec2.region": REGION,
            "provider.ec2.orchestrator_cidr": "10.1.2.3/32", "provider.ec2.instance_types": ["p5en.48xlarge"],
            "provider.ec2.instance_profile": "benchcamp-engine"}
    return load_config(None, {**base, **over})


def _provider(client, cfg, attempts: int = 5) -> Ec2Provider:
    # A fresh provider per call, as in an Airflow retry; no real sleeping between lookups.
    return get_provider(cfg, boot=node_boot(cfg), client=client, waiter_delay_s=1, lookup_delay_s=0.0, lookup_attempts=attempts)


def _instances(client, states=("pending", "running")):
    res = client.describe_instances(Filters=[{"Name": "instance-state-name", "Values": list(states)}])
    return [i for r in res["Reservations"] for i in r["Instances"]]


def test_moto_retry_injected_token_mismatch_reuses_the_first_node_and_its_key(ec2, instance_profile):
    cfg = _cfg()
    quirks = Ec2Quirks(ec2)
    first_p = _provider(ec2, cfg)
    first = first_p.provision("run-mm")
    first_key = first_p.api_key_for(first)
    # The retry's tag and token lookups miss (listing lag), so it calls run_instances with the same
    # token and new user data; EC2 answers with the mismatch, and the instance shows up on a later lookup.
    quirks.hide_listings = 3
    second_p = _provider(ec2, cfg)
    second = second_p.provision("run-mm")
    assert quirks.mismatches == 1
    assert quirks.launches == [client_token("run-mm", "p5en.48xlarge", None)] * 2
    assert second.node_id == first.node_id and second.host == first.host
    assert second_p.api_key_for(second) == first_key  # the key of the engine that node runs
    assert [i["InstanceId"] for i in _instances(ec2, ("pending", "running", "stopped", "terminated"))] == \
        [first.node_id]


def test_moto_retry_finds_the_node_by_client_token_when_the_tag_lookup_misses(ec2, instance_profile):
    cfg = _cfg(**{"provider.ec2.instance_types": ["p5en.48xlarge", "p5e.48xlarge"],
                  "provider.ec2.availability_zones": ["us-east-1a", "us-east-1b"]})
    quirks = Ec2Quirks(ec2)
    first = _provider(ec2, cfg).provision("run-tok")
    quirks.hide_listings = 1  # only the tag lookup misses
    second = _provider(ec2, cfg).provision("run-tok")
    assert second.node_id == first.node_id
    assert len(quirks.launches) == 1 and quirks.mismatches == 0  # found before launching
    assert len(_instances(ec2)) == 1


def test_moto_injected_mismatch_with_the_node_never_listed_is_a_clear_error_and_launches_nothing(ec2, instance_profile):
    cfg = _cfg()
    quirks = Ec2Quirks(ec2)
    first = _provider(ec2, cfg).provision("run-lag")
    quirks.hide_listings = 100
    with pytest.raises(ProvisionError, match=f"{TOKEN_IN_USE}.*retry the task.*benchcamp:execution-id=run-lag"):
        _provider(ec2, cfg, attempts=3).provision("run-lag")
    assert quirks.mismatches == 1 and len(quirks.launches) == 2
    quirks.hide_listings = 0
    assert [i["InstanceId"] for i in _instances(ec2)] == [first.node_id]


def test_moto_injected_mismatch_for_a_terminated_node_launches_on_the_next_candidate(ec2, instance_profile):
    cfg = _cfg(**{"provider.ec2.availability_zones": ["us-east-1a", "us-east-1b"]})
    quirks = Ec2Quirks(ec2)
    p = _provider(ec2, cfg)
    first = p.provision("run-dead")
    p.terminate(first.node_id)  # e.g. an earlier attempt's cleanup after a failed start
    second = _provider(ec2, cfg).provision("run-dead")
    assert quirks.mismatches == 1 and second.node_id != first.node_id
    assert second.meta["zone"] == "us-east-1b"
    assert [i["InstanceId"] for i in _instances(ec2)] == [second.node_id]


def test_moto_injected_mismatch_on_every_candidate_with_dead_nodes_names_the_fix(ec2, instance_profile):
    cfg = _cfg()
    Ec2Quirks(ec2)
    p = _provider(ec2, cfg)
    first = p.provision("run-gone")
    p.terminate(first.node_id)
    with pytest.raises(ProvisionError, match=rf"token used by {first.node_id} \(terminated\).*"
                                             "provider.ec2.instance_types"):
        _provider(ec2, cfg).provision("run-gone")
    assert _instances(ec2) == []
