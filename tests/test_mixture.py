"""Client mixtures: each client's rate, burstiness and lengths are its parameters in the
merged stream (bounds from sampling theory), and clients do not disturb each other."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servesim.config import MixtureWorkload, RateProfileConfig
from servesim.workload import load_workload
from servesim.workload.rate_profile import RateProfile

DAY = 86400.0
CLIENTS = [
    {
        "name": "chat",
        "arrival": {
            "process": "poisson",
            "rate": 2.0,
            "rate_profile": {"shape": "diurnal", "peak": 1.0, "trough": 0.2},
        },
        "prompt_len": {"kind": "lognormal", "mean": 1000, "std": 800},
        "output_len": {"kind": "lognormal", "mean": 250, "std": 200},
    },
    {
        "name": "api",
        "arrival": {"process": "gamma", "rate": 1.0, "cv": 3.0},
        "prompt_len": {"kind": "lognormal", "mean": 3000, "std": 1500},
        "output_len": {"kind": "constant", "value": 60},
    },
    {
        "name": "batch",
        "arrival": {"process": "weibull", "rate": 0.5, "cv": 0.5},
        "prompt_len": {"kind": "uniform", "low": 100, "high": 500},
        "output_len": {"kind": "constant", "value": 500},
    },
]


def cv_standard_error(process: str, cv: float, n: int) -> float:
    """Delta-method standard error of the sample CV of n i.i.d. gaps, from the gap
    distribution's raw moments E[X^r] (unit scale: the CV does not depend on it)."""
    from servesim.workload.synthetic import weibull_shape

    if process == "gamma":
        k = 1 / cv**2
        raw = [math.exp(math.lgamma(k + r) - math.lgamma(k)) for r in range(5)]
    else:
        k = weibull_shape(cv)
        raw = [math.gamma(1 + r / k) for r in range(5)]
    mu = raw[1]
    var = raw[2] - mu**2
    mu3 = raw[3] - 3 * mu * raw[2] + 2 * mu**3
    mu4 = raw[4] - 4 * mu * raw[3] + 6 * mu**2 * raw[2] - 3 * mu**4
    rel = (mu4 - var**2) / (4 * var**2) + var / mu**2 - mu3 / (var * mu)
    return cv * math.sqrt(rel / n)


def mixture(**kw) -> MixtureWorkload:
    return MixtureWorkload.model_validate({"clients": CLIENTS, "duration_s": DAY, **kw})


def test_each_client_keeps_its_parameters():
    """Over a day: each client's count within 4 sigma of rate x integral of its profile
    (sigma^2 = cv^2 x mean, a renewal count), its gaps' CV within 4 delta-method standard
    errors (clients without a profile), its
    mean lengths within 4 standard errors of the distribution's mean."""
    wl = load_workload(mixture())
    wl.validate()
    client = wl.meta["client"]
    for i, c in enumerate(CLIENTS):
        t = wl.arrival_s[client == i]
        a = c["arrival"]
        cv = a.get("cv", 1.0)
        prof = a.get("rate_profile")
        mean_n = a["rate"] * (
            float(RateProfile.from_config(RateProfileConfig(**prof)).cumulative(DAY)) if prof else DAY
        )
        assert abs(len(t) - mean_n) < 4 * cv * math.sqrt(mean_n), c["name"]
        if prof is None:
            g = np.diff(t)
            se = cv_standard_error(a["process"], cv, len(g))
            assert abs(g.std() / g.mean() - cv) < 4 * se, c["name"]
        p = wl.num_prompt_tokens[client == i]
        d = c["prompt_len"]
        mean, std = (
            ((d["low"] + d["high"]) / 2, (d["high"] - d["low"] + 1) / math.sqrt(12))
            if d["kind"] == "uniform"
            else (d["mean"], d["std"])
        )
        assert abs(p.mean() - mean) < 4 * std / math.sqrt(len(p)), c["name"]
    assert wl.meta["requests_per_client"] == {
        c["name"]: int((client == i).sum()) for i, c in enumerate(CLIENTS)
    }


def test_clients_are_independent_and_num_requests_cuts_the_merge():
    full = load_workload(mixture())
    two = load_workload(MixtureWorkload.model_validate({"clients": CLIENTS[:2], "duration_s": DAY}))
    # The first two clients' requests are the same with or without the third.
    for i in range(2):
        np.testing.assert_array_equal(
            full.arrival_s[full.meta["client"] == i], two.arrival_s[two.meta["client"] == i]
        )
    cut = load_workload(MixtureWorkload.model_validate({"clients": CLIENTS[1:], "num_requests": 500}))
    assert len(cut) == 500 and len(cut.meta["client"]) == 500
    assert np.all(np.diff(cut.arrival_s) >= 0)


def test_a_client_quiet_while_num_requests_fill_keeps_its_name_with_zero_requests():
    # 20 requests at 10 req/s take a horizon of 1.2 x 20 / 10.0001 = 2.4 s, in which a client
    # at 1e-4 req/s draws no arrival (it did draw none with this seed): the merge holds the
    # busy client's 20 and counts 0 for the quiet one.
    busy = {"name": "busy", "arrival": {"process": "poisson", "rate": 10.0}}
    quiet = {"name": "quiet", "arrival": {"process": "poisson", "rate": 1e-4}}
    wl = load_workload(MixtureWorkload.model_validate({"clients": [busy, quiet], "num_requests": 20}))
    assert len(wl) == 20
    assert wl.meta["requests_per_client"] == {"busy": 20, "quiet": 0}
    assert wl.tenant.tolist() == [0] * 20


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"clients": [CLIENTS[0], CLIENTS[0]]}, "names must differ"),
        ({"clients": [{"name": "x", "arrival": {"process": "burst"}}]}, "burst"),
    ],
)
def test_bad_mixtures(kw, needle):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=needle):
        MixtureWorkload.model_validate({"duration_s": 10, **kw})
