"""The reviewer's streams, shortened, through the README's path: `calibflow init --monitor` per source ->
`calibflow run` -> `calibflow monitor run` every day, with a late day, a bad source beside good ones and a
shift in one country (benchmarks/monitor_streams.py runs the full 60 days)."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.monitor_streams import Plan, collect, free_port, run_days, setup, teardown
from calibflow import monitor as mon
from calibflow.experiments import monitor_streams as M

pytestmark = [pytest.mark.slow, pytest.mark.dvc, pytest.mark.server]

PLAN = Plan(days=20, rows=40_000, history=21, shift_day=11, late_day=4, bad_day=3, calib_windows=7)
#: The run that first checks the bad day's file: day d's run is on the morning of day d + 1, and the bad
#: day's window matures label_delay (the default, 2D) after its end, so on the run of bad_day + 2.
BAD_RUN = PLAN.bad_day + pd.Timedelta(mon.MonitorConfig().label_delay).days


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    root = tmp_path_factory.mktemp("streams") / "project"
    port = free_port()  # not 4200: two CI runs on one machine collided there ("port taken")
    try:
        setup(root, PLAN, port)
        # The day-by-day assertions need the stage's results, not the command: in process, except the
        # first run that refuses the bad delivery, where the command's own exit code and output are under
        # test.
        res = run_days(root, PLAN, port, cli_days={BAD_RUN})
    finally:
        teardown(root)
    yield collect(root, PLAN, res), res


def test_stable_windows_raise_no_alert_and_the_served_champion_adds_up(streams):
    f, _ = streams
    for name in (*M.STREAMS, "broken"):
        s = f["sources"][name]
        assert s["alert_windows_0_9"] == [], (name, s["incidents"])
        assert s["served_ratio_stable_days_max_dev"] < 0.05, (name, s["served_ratio_stable_days"])


def test_a_late_day_is_scored_and_a_bad_source_leaves_the_others_scored(streams):
    f, res = streams
    for name in ("stable", "fr_shift"):
        assert f["sources"][name]["late_day_scored"]
        assert any("rescored from" in n for n in f["sources"][name]["rescored_notes"])
    bad_runs = [r for r in res["runs"] if r["rc"] != 0]
    assert any(r["day"] == BAD_RUN for r in bad_runs)  # the real command's exit code
    assert bad_runs and {r["day"] for r in bad_runs} <= set(range(PLAN.bad_day, PLAN.bad_day + 3))
    assert all("broken" in r["output"] and "clicked" in r["output"] for r in bad_runs)  # named
    scored = {n: f["sources"][n]["windows_scored"] for n in f["sources"]}
    assert len(set(scored.values())) == 1, scored  # the broken one caught up after its fixed file
    assert scored["stable"] == PLAN.days - 2  # every matured window, the late one included
    assert f["runs"]["max_stderr_lines"] < 20  # no Prefect tracebacks around the refusal


def test_the_fr_shift_is_one_incident_open_until_fr_is_back_in_band(streams):
    f, _ = streams
    incs = f["sources"]["fr_shift"]["incidents"]
    fr = [i for i in incs if i["segment"] == "country=FR" and i["metric"] == "calibration_ratio"]
    assert len(fr) == 1 and PLAN.shift_day <= fr[0]["opened"] <= PLAN.shift_day + 1, incs
    assert fr[0]["worst"] < 0.85  # served at about 1/1.3 of the truth on FR
    others = [i for i in incs if i["segment"] not in ("country=FR", "all")]
    assert others == [], others  # the segmented challenger leaves DE, US, UK alone
    served = f["sources"]["fr_shift"]["served_fr_after_shift"]
    if fr[0]["closed"] is not None:  # closed only once FR is back: its served ratio is in band by then
        assert abs(served[fr[0]["closed"]] - 1) < 0.1, served
    else:
        assert abs(served[min(served)] - 1) > 0.1
