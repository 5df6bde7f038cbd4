"""API price profiles: what a served token would have earned.

Profiles live in ``benchcamp/data/pricing.yaml`` with their dates and sources.
``cfg.pricing.usd_per_mtok`` overrides the named profile's prices (the result
keeps the profile's name with ``+override`` so reports never mix them up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from benchcamp.data import load_data
from benchcamp.errors import ConfigError

PRICE_FIELDS = ("cached_input", "uncached_input", "output")


@dataclass(frozen=True)
class PricingProfile:
    """USD per million tokens, by kind of token."""

    name: str
    cached_input: float
    uncached_input: float
    output: float
    source: str = ""
    date: str = ""
    notes: str = ""
    verification: str = "unverified"
    hours_utc: str = ""

    def revenue_usd(self, cached: float, uncached: float, output: float) -> float:
        """Revenue in USD of the given token counts."""
        return (cached * self.cached_input + uncached * self.uncached_input + output * self.output) / 1e6

    def blended_usd_per_mtok(self, cached: float, uncached: float, output: float) -> float:
        """Average price per million tokens over a token mix (NaN for no tokens)."""
        total = cached + uncached + output
        return self.revenue_usd(cached, uncached, output) / total * 1e6 if total > 0 else float("nan")


def _profiles() -> dict[str, dict[str, Any]]:
    data = load_data("pricing.yaml") or {}
    return data.get("profiles", {})


def list_profiles() -> list[str]:
    return sorted(_profiles())


def load_profile(name: str) -> PricingProfile:
    profiles = _profiles()
    if name not in profiles:
        raise ConfigError(
            f"pricing.profile: unknown pricing profile {name!r}; known profiles: {', '.join(sorted(profiles))} "
            "(or set pricing.usd_per_mtok.{cached_input,uncached_input,output})"
        )
    return _from_entry(name, profiles[name])


def _from_entry(name: str, entry: dict[str, Any]) -> PricingProfile:
    for f in PRICE_FIELDS:
        value = entry.get(f)
        if not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"benchcamp/data/pricing.yaml: profiles.{name}.{f} must be a number >= 0, got {value!r}")
    dates = [d for d in (entry.get("valid_from"), entry.get("valid_until")) if d]
    return PricingProfile(
        name=name,
        cached_input=float(entry["cached_input"]),
        uncached_input=float(entry["uncached_input"]),
        output=float(entry["output"]),
        source=str(entry.get("source") or ""),
        date=" to ".join(str(d) for d in dates) if len(dates) == 2 else (f"from {dates[0]}" if dates else ""),
        notes=str(entry.get("notes") or "").strip(),
        verification=str(entry.get("verification") or "unverified"),
        hours_utc=str(entry.get("hours_utc") or ""),
    )


class PriceOverride(Protocol):
    """Prices in USD per million tokens that replace a profile's (the config's ``pricing.usd_per_mtok``)."""

    @property
    def cached_input(self) -> float: ...
    @property
    def uncached_input(self) -> float: ...
    @property
    def output(self) -> float: ...


class PricingChoice(Protocol):
    """What prices_for reads: the config's ``pricing`` section (benchcamp.config.Pricing, a layer above)."""

    @property
    def profile(self) -> str: ...
    @property
    def usd_per_mtok(self) -> PriceOverride | None: ...


def prices_for(pricing: PricingChoice) -> PricingProfile:
    """The profile the config's ``pricing`` section asks for, with ``pricing.usd_per_mtok`` applied when set."""
    base = load_profile(pricing.profile)
    override = pricing.usd_per_mtok
    if override is None:
        return base
    return PricingProfile(
        name=f"{base.name}+override",
        cached_input=float(override.cached_input),
        uncached_input=float(override.uncached_input),
        output=float(override.output),
        source="config: pricing.usd_per_mtok",
        date="",
        notes=f"prices overridden in the config (base {base.name})",
        verification="config",
        hours_utc=base.hours_utc,
    )


@dataclass(frozen=True)
class TokenMix:
    """Shares of all served tokens (they sum to 1) by kind."""

    cached_input: float
    uncached_input: float
    output: float

    @property
    def cache_hit_rate(self) -> float:
        """Cached share of the input tokens."""
        return self.cached_input / (self.cached_input + self.uncached_input)


def mix_for_blended_price(profile: PricingProfile, usd_per_mtok: float, output_share: float) -> TokenMix:
    """The token mix whose blended price at ``profile`` is ``usd_per_mtok``, given the output share.

    One revenue figure fixes one equation in the three shares: with the output share given
    (x_o), the input split follows:
        x_c + x_u = 1 - x_o
        p_c x_c + p_u x_u + p_o x_o = usd_per_mtok
    =>  x_u = (usd_per_mtok - p_o x_o - p_c (1 - x_o)) / (p_u - p_c).
    Raises ValueError when no mix of that output share reaches the price.
    """
    x_o = output_share
    if not 0 <= x_o < 1:
        raise ValueError(f"output_share={x_o}: must be in [0, 1)")
    p_c, p_u, p_o = profile.cached_input, profile.uncached_input, profile.output
    lowest, highest = p_c * (1 - x_o) + p_o * x_o, p_u * (1 - x_o) + p_o * x_o
    if not lowest <= usd_per_mtok <= highest:
        raise ValueError(
            f"${usd_per_mtok:.6f}/Mtok is outside what {profile.name} gives with {x_o:.2%} output "
            f"tokens (${lowest:.6f} all input cached .. ${highest:.6f} none cached)"
        )
    x_u = (usd_per_mtok - p_o * x_o - p_c * (1 - x_o)) / (p_u - p_c)
    return TokenMix(cached_input=1 - x_o - x_u, uncached_input=x_u, output=x_o)
