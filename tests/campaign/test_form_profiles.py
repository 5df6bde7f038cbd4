"""The trigger form's profile choices are the profile files the simulator finds, user folders included."""

from __future__ import annotations

from benchcamp.campaign.form import form_fields, form_overrides
from benchcamp.engine.profiles import available


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
