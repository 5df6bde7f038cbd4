"""The trigger form's profile choices are the profile files the simulator finds, user folders included."""

from __future__ import annotations

from benchcamp.campaign.form import form_fields, form_overrides
from benchcamp.profiles import available


def test_form_offers_every_gpu_and_engine_profile_the_simulator_finds(tmp_path, monkeypatch):
    for kind, name in (("gpus", "h300"), ("engines", "vllm-h300")):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / f"{name}.yaml").write_text(f"name: {name}\n")
    monkeypatch.setenv("BENCHCAMP_PROFILE_PATH", str(tmp_path))
    fields = form_fields()
    assert fields["gpu"]["enum"] == available("gpus") and "h300" in fields["gpu"]["enum"]
    assert fields["engine_profile"]["examples"] == available("engines") and "vllm-h300" in available("engines")
    assert "enum" not in fields["engine_profile"] and fields["engine_profile"]["default"] is None
    assert fields["model_profile"]["enum"] == available("models")
    # empty keeps params.yaml's (the derived default); a name is an override
    assert "engine.engine_profile" not in form_overrides({"engine_profile": None})
    assert form_overrides({"engine_profile": "vllm-h300"})["engine.engine_profile"] == "vllm-h300"


def test_the_form_on_the_default_params_yaml_resolves_to_its_config(monkeypatch):
    """The nightly's form defaults on the repository's params.yaml (the seed-language default: a 1P2D topology
    on the virtual clock) are the file's values, inside the form's choices, and resolve to the file's config
    (a scheduled run takes them). The manual form's are one engine (Topology none): test_form_one_gpu."""
    from pathlib import Path

    from benchcamp.campaign import form
    from benchcamp.config import load_config

    params = Path(__file__).resolve().parents[2] / "params.yaml"
    monkeypatch.setattr(form, "PARAMS_FILE", params)  # the Airflow tests point it at tests/params-http.yaml
    fields = form.form_fields(nightly=True)
    defaults = {k: spec["default"] for k, spec in fields.items()}
    cfg = load_config(params)
    assert (defaults["gpu"], defaults["workload"], defaults["clock"]) == ("gb300", "agentx-like", "virtual")
    assert defaults["levels"] == cfg.load.levels and defaults["pricing_profile"] == cfg.pricing.profile
    for name in ("gpu", "model_profile", "workload", "pricing_profile", "clock"):
        assert defaults[name] in fields[name]["enum"], name
    [item] = form.resolve_items(defaults, "benchcamp_campaign", "manual__x", params_file=params)
    assert item.fingerprint == cfg.fingerprint()
    assert item.config["topology"] == cfg.to_dict()["topology"]  # the form keeps the topology of the file
