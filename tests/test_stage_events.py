"""The solve-time event machine (legacy, `gradflow._stage_events`) on synthetic
curves with known answers."""

import numpy as np
import pytest
from scipy.integrate import cumulative_trapezoid
from scipy.optimize import brentq

import gradflow as gf
from gradflow._stage_events import detect_event_stages


LOG_D, UNIGRAM = np.log(4.0), 1.2
D = 4
TH = gf.StageThresholds()


def bump(u, center, width, height):
    return height * np.exp(-0.5 * ((u - center) / width) ** 2)


def bump_crossings(center, width, height, level):
    """Where `bump` equals `level` (up, down), in u = log t."""
    half = width * np.sqrt(2 * np.log(height / level))
    return center - half, center + half


def synthetic(
    focus_height=1.0,
    direction_height=6.0,
    focus_token=2,
    mass_amplitude=0.3,
    noise=0.0,
    n=6000,
    seed=0,
):
    """Curves for: a saddle escape at u = 3 (condensation), a second drop at
    u = 4.5 carrying a focus on `focus_token` (its mass rises, peaks, falls),
    and a new direction growing around u = 7. Rates are per unit u = log t."""
    u = np.linspace(np.log(1e-2), np.log(2e4), n)
    t = np.exp(u)
    speed = bump(u, 3.0, 0.15, 1.0) + bump(u, 4.6, 0.25, 0.5) + bump(u, 7.0, 0.3, 0.2)
    entropy_rate = -bump(u, 4.4, 0.3, focus_height)
    # Mass of the focus token: up by mass_amplitude around u = 4.4, back down
    # by half of it around u = 4.8.
    m_rate = bump(u, 4.4, 0.15, mass_amplitude / (0.15 * np.sqrt(2 * np.pi))) - bump(
        u, 4.8, 0.15, 0.5 * mass_amplitude / (0.15 * np.sqrt(2 * np.pi))
    )
    mass_rate = np.tile(-m_rate[:, None] / (D - 1), (1, D))
    mass_rate[:, focus_token] = m_rate
    rng = np.random.default_rng(seed)
    if noise:
        speed = speed + noise * 1e-3 * rng.standard_normal(n)
        entropy_rate = entropy_rate + noise * 1e-2 * rng.standard_normal(n)
    att_mass = np.full(D, 1.0 / D) + cumulative_trapezoid(
        mass_rate, u, axis=0, initial=0
    )
    sv_rate = np.stack(
        [bump(u, 7.0, 0.4, direction_height) - 0.05, np.full(n, -0.05)], 1
    )
    sv_ratio = 1e-3 * np.exp(cumulative_trapezoid(sv_rate, u, axis=0, initial=0))
    loss = LOG_D - cumulative_trapezoid(speed, u, initial=0) * (LOG_D - 0.5) / 2
    curves = dict(
        loss=loss,
        speed=speed,
        entropy_rate=entropy_rate,
        mass_rate=mass_rate,
        att_mass=att_mass,
        sv_rate=sv_rate,
        sv_ratio=sv_ratio,
    )
    return t, u, curves, m_rate


def run(t, curves, **kw):
    return detect_event_stages(t, **curves, log_d=LOG_D, unigram=UNIGRAM, **kw)


def test_known_stage_sequence_and_times():
    t, u, curves, m_rate = synthetic()
    stages, events = run(t, curves)
    assert [s.name for s in stages] == [
        "condensation",
        "focus",
        "dilution",
        "new_direction",
    ]
    cond, focus, dil, new = stages
    u_entry1 = bump_crossings(3.0, 0.15, 1.0, TH.entry_speed)[1]
    u_focus = bump_crossings(4.4, 0.3, 1.0, TH.focus_rate)[0]
    u_peak = brentq(lambda x: np.interp(x, u, m_rate), 4.45, 4.8)
    # Dilution ends when the second drop settles into its saddle.
    u_entry2 = brentq(
        lambda x: np.interp(x, u, curves["speed"]) - TH.entry_speed, 4.7, 6.0
    )
    u_dir0, u_dir1 = bump_crossings(7.0, 0.4, 6.0, TH.direction_rate + 0.05)
    for got, want in [
        (cond.t_end, u_entry1),
        (focus.t_start, u_focus),
        (focus.t_end, u_peak),
        (dil.t_start, u_peak),
        (dil.t_end, u_entry2),
        (new.t_start, u_dir0),
        (new.t_end, u_dir1),
    ]:
        np.testing.assert_allclose(np.log(got), want, atol=2e-3)
    assert cond.t_start == t[0] and cond.cycle == 1
    assert focus.tokens == (2,) and dil.tokens == (2,)
    assert focus.cycle == dil.cycle == 1 and new.cycle == 2
    mass = curves["att_mass"][:, 2]
    gained = np.interp(u_peak, u, mass) - np.interp(u_focus, u, mass)
    assert focus.mass_end - focus.mass_start == pytest.approx(gained, abs=1e-4)
    assert gained > 0.2
    assert all(s.complete for s in stages)
    # The new direction contains the time at which sigma_2 / sigma_1 passes 0.1.
    t_ratio = t[np.argmax(curves["sv_ratio"][:, 0] > 0.1)]
    assert new.t_start < t_ratio < new.t_end
    names = [e["name"] for e in events]
    assert names[:2] == ["saddle_escape", "saddle_entry"]
    assert names.count("focus_start") == 1 and names.count("focus_end") == 1


def test_focus_token_is_read_from_the_data():
    # The focus goes to token 3 here; nothing assumes the most frequent token.
    t, _, curves, _ = synthetic(focus_token=3)
    stages, _ = run(t, curves)
    assert [s.tokens for s in stages if s.name == "focus"] == [(3,)]


def test_no_new_direction_when_singular_values_stay_put():
    # A symmetric chain sitting on its degenerate point: sigma_2 / sigma_1 flat.
    t, _, curves, _ = synthetic(direction_height=0.0)
    stages, events = run(t, curves)
    assert "new_direction" not in [s.name for s in stages]
    assert not any("direction" in e["name"] for e in events)


def test_noise_below_thresholds_adds_no_stage():
    t, _, clean, _ = synthetic()
    t, _, noisy, _ = synthetic(noise=1.0, seed=3)
    names = [s.name for s in run(t, clean)[0]]
    assert [s.name for s in run(t, noisy)[0]] == names


def test_drift_of_attention_is_not_a_focus():
    # The entropy falls fast enough to start a focus, but less than
    # min_mass_change of attention moves: no focus and no dilution.
    t, _, curves, _ = synthetic(mass_amplitude=0.01)
    stages, events = run(t, curves)
    assert [s.name for s in stages] == ["condensation", "new_direction"]
    assert "focus_drift_end" in [e["name"] for e in events]


def test_chained_new_direction():
    # sigma_3 starts growing while sigma_2's stage is still open: its stage
    # starts when sigma_2's ends.
    t, u, curves, _ = synthetic()
    rate2 = bump(u, 7.6, 0.5, 3.0) - 0.05
    curves["sv_rate"][:, 1] = rate2
    curves["sv_ratio"][:, 1] = 1e-4 * np.exp(cumulative_trapezoid(rate2, u, initial=0))
    stages, _ = run(t, curves)
    new = [s for s in stages if s.name == "new_direction"]
    assert len(new) == 2
    assert new[1].t_start == pytest.approx(new[0].t_end)
    assert [s.cycle for s in new] == [2, 3]


def test_paused_growth_keeps_the_direction_open():
    # sigma_2 / sigma_1 grows, pauses (rate below direction_rate) while still
    # below 0.1, then grows again: one new_direction stage, spanning both.
    t, u, curves, _ = synthetic()
    rate = bump(u, 6.4, 0.25, 4.0) + bump(u, 7.6, 0.3, 6.0) - 0.05
    curves["sv_rate"][:, 0] = rate
    curves["sv_ratio"][:, 0] = 1e-3 * np.exp(cumulative_trapezoid(rate, u, initial=0))
    stages, events = run(t, curves)
    new = [s for s in stages if s.name == "new_direction"]
    assert len(new) == 1
    ratio_at_pause = np.interp(7.0, u, curves["sv_ratio"][:, 0])
    assert ratio_at_pause < 0.1  # the pause happens before the direction opens
    assert "new_direction_pause" in [e["name"] for e in events]
    t_ratio = t[np.argmax(curves["sv_ratio"][:, 0] > 0.1)]
    assert new[0].t_start < np.exp(6.4) < t_ratio < new[0].t_end


def test_bad_input():
    t, _, curves, _ = synthetic(n=50)
    bad = dict(curves, speed=curves["speed"][:-1])
    with pytest.raises(ValueError, match="speed must have 50 samples"):
        run(t, bad)
    with pytest.raises(ValueError, match="strictly increasing"):
        run(t[::-1], curves)
    with pytest.raises(ValueError, match="entry_speed must be < escape_speed"):
        gf.StageThresholds(entry_speed=0.1, escape_speed=0.01)
    with pytest.raises(ValueError, match="focus_rate must be finite and > 0, got -1"):
        gf.StageThresholds(focus_rate=-1.0)
