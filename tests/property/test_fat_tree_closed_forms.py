"""Closed forms of folded-Clos fabrics (Al-Fares et al. 2008; Leiserson 1985) as properties of the builder."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mfukit.fabric.fat_tree import build, k_ary_fat_tree, leaf_split, levels_needed, max_endpoints

EVEN_RADIX = st.integers(min_value=2, max_value=64).map(lambda half: 2 * half)


@given(EVEN_RADIX)
def test_two_tiers_serve_r_squared_over_two(radix: int) -> None:
    half = radix // 2
    clos = build(leaves=radix, leaf_down=half, leaf_up=half, radix=radix, endpoint_ports=radix * half)
    assert max_endpoints(radix, 2) == radix**2 // 2 == clos.endpoint_ports
    assert clos.levels == 2
    assert clos.tier("spine") is not None and clos.tier("spine").switches == half  # type: ignore[union-attr]
    assert clos.bisection_ports == radix**2 / 4


@given(EVEN_RADIX)
def test_one_more_leaf_needs_a_third_tier(radix: int) -> None:
    half = radix // 2
    clos = build(
        leaves=radix + 1, leaf_down=half, leaf_up=half, radix=radix, endpoint_ports=(radix + 1) * half
    )
    assert clos.levels == 3
    assert levels_needed(radix**2 // 2 + 1, radix) == 3


@given(st.integers(min_value=2, max_value=32).map(lambda half: 2 * half))
def test_k_ary_fat_tree_hosts_and_switches(k: int) -> None:
    clos = k_ary_fat_tree(k)
    assert clos.endpoint_ports == k**3 // 4 == max_endpoints(k, 3)
    assert clos.switches == 5 * k**2 // 4
    assert [t.switches for t in clos.tiers] == [k**2 // 2, k**2 // 2, k**2 // 4]
    assert all(t.ports_free == 0 for t in clos.tiers)
    assert clos.max_hops == 5


@settings(max_examples=150)
@given(EVEN_RADIX, st.data())
def test_any_endpoint_count_fits_and_is_non_blocking(radix: int, data: st.DataObject) -> None:
    endpoints = data.draw(st.integers(min_value=1, max_value=max_endpoints(radix, 3)))
    half = radix // 2
    if endpoints <= radix:  # one switch, every port down
        clos = build(leaves=1, leaf_down=radix, leaf_up=0, radix=radix, endpoint_ports=endpoints)
    else:
        leaves = -(-endpoints // half)
        clos = build(leaves=leaves, leaf_down=half, leaf_up=half, radix=radix, endpoint_ports=endpoints)
    assert clos.levels == levels_needed(endpoints, radix)
    for tier in clos.tiers:
        assert tier.down_ports_used + tier.up_ports_used <= tier.ports
        assert tier.up_ports_used == 0 or tier.oversubscription <= 1.0
    assert clos.bisection_ports == endpoints / 2


@given(EVEN_RADIX, st.floats(min_value=1.0, max_value=7.0))
def test_leaf_split_keeps_the_ratio_and_the_radix(radix: int, ratio: float) -> None:
    down, up = leaf_split(radix, ratio)
    assert down + up == radix and up >= 1
    assert down / up <= ratio + 1e-9  # never more oversubscribed than asked
    assert up == 1 or (down + 1) / (up - 1) > ratio - 1e-9  # and one port more down would be
