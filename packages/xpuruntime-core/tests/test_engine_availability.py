"""The native engine registry holds the process's engine availability: what is published is
what is read back (selection asks it before probing an engine again)."""

from __future__ import annotations

from xpuruntime.runtime.dispatch import engine_registry
from xpuruntime.runtime.engines import Availability


def test_published_availability_reads_back_exactly() -> None:
    found = Availability(
        available=True,
        devices=("cpu", "cuda:0"),
        versions={"fakert": "1.2.3", "driver": "580 beta"},
    )
    engine_registry.publish("fakert-available", found, aliases=("fake",))
    assert engine_registry.availability("fakert-available") == found
    assert engine_registry.find(devices="cuda:0") == ["fakert-available"]
    engine_registry.unregister("fakert-available")
    assert engine_registry.availability("fakert-available") is None


def test_an_unavailable_engine_keeps_its_reason_and_lists_no_device() -> None:
    found = Availability(
        available=False,
        reason="libfake.so is missing",
        install_hint="pip install fakert",
        devices=("cpu",),
    )
    engine_registry.publish("fakert-missing", found)
    back = engine_registry.availability("fakert-missing")
    assert back == Availability(
        available=False, reason="libfake.so is missing", install_hint="pip install fakert"
    )
    assert "fakert-missing" not in engine_registry.find(devices="cpu")
    engine_registry.unregister("fakert-missing")
