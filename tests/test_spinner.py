"""The adaptive busy-wait in front of every blocking wait (``vecshm.shared.sync.Spinner``)."""

from __future__ import annotations

import numpy as np

from vecshm.shared.sync import Spinner

CAP = 150e-6  # the workers' automatic cap


def _after(waits: np.ndarray, cap: float = CAP) -> Spinner:
    spinner = Spinner(cap)
    for waited in waits.tolist():
        spinner.record(waited)
    return spinner


def test_spins_through_the_high_end_of_short_waits_with_a_long_tail():
    # An async batch's worker waits, measured on 2 cores: mostly 35-120 us, some up to 180 us.
    rng = np.random.default_rng(0)
    waits = np.where(rng.random(2000) < 0.5, rng.uniform(33e-6, 45e-6, 2000), rng.uniform(70e-6, 180e-6, 2000))
    spinner = _after(waits)
    assert spinner.budget() > 1.5 * spinner.average  # more than the average alone would give
    assert spinner.budget() <= CAP
    covered = np.mean(waits[-200:] <= spinner.budget())
    assert covered > 0.85, f"only {covered:.0%} of recent waits would end within the spin"


def test_does_not_spin_while_waits_are_typically_longer_than_the_cap():
    # A learner computing between steps: the workers wait milliseconds, and spinning would take its cores.
    spinner = _after(np.full(50, 2e-3))
    assert spinner.budget() == 0.0
    assert not spinner.spin(lambda: False)


def test_a_call_limit_below_the_cap_applies():
    spinner = _after(np.full(50, 100e-6), cap=1e-3)
    assert 0 < spinner.budget() <= 1e-3
    assert spinner.budget(limit=50e-6) == 0.0  # waits typically longer than the limit: no spin
    assert spinner.budget(limit=300e-6) <= 300e-6


def test_spinning_is_off_without_a_budget():
    calls = []
    assert not Spinner(0.0).spin(lambda: calls.append(1) or False)
    assert calls == []


def test_a_floor_covers_outliers_beyond_the_high_end_but_not_waits_too_long_to_spin():
    # A tight loop's waits of 40 us, steady: the high end alone is about 40 us, so a 300 us outlier
    # (a garbage collection in the parent, say) would be slept through and cost a wake-up.
    spinner = _after(np.full(50, 40e-6), cap=1e-3)
    assert spinner.budget() < 50e-6
    assert spinner.budget(floor=300e-6) == 300e-6
    assert spinner.budget(floor=5e-3) == 1e-3  # never beyond the cap
    assert spinner.budget(limit=150e-6, floor=300e-6) == 150e-6  # ... nor a call's limit
    # waits typically longer than the cap are not spun, floor or not
    assert _after(np.full(50, 2e-3), cap=1e-3).budget(floor=300e-6) == 0.0
