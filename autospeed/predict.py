"""Predicted time to target: where a trial's evaluation curve would meet the target, with an 80% interval
(DESIGN.md "Long jobs: predicted time to target"). numpy only.

The curve is the target metric against train seconds, turned into a quantity that falls as the run
improves (the loss as it is, an accuracy negated). It is fitted by an ensemble of saturating learning-curve
models, each `y = c + a * phi(x)` with `a > 0` and one shape parameter on a grid (Domhan et al. 2015's
families, fitted the fast way: for a fixed shape the model is linear in `c` and `a`):

    power        phi = x ** -theta              (pow3)
    bounded      the power law down to the metric's bound (a loss to 0, an accuracy to 1): c is the bound
    exponential  phi = exp(-x / tau)            (exp3)
    hyperbolic   phi = 1 / (1 + x / tau)        (MMF with delta 1, Janoschek's early shape)
    log          phi = -log(x)                  (log-linear: never saturates; the optimistic member)

Every (family, shape) is one hypothesis, weighted by its profile likelihood (SSE ** -n/2: the Bayesian model
average with a flat prior, Laplace's approximation for `c` and `a`). Draws from that posterior give crossing
times; their 10th, 50th and 90th percentiles are the prediction. Draws whose asymptote never meets the target
cross at infinity.

No number comes out of a curve that cannot carry one; `Prediction.note` says why:
  * too few evaluations (`min_points`);
  * flat: the fitted improvement over the curve is within its noise;
  * diverging: the last third of the curve gets worse beyond its noise (or a value is not finite);
  * levels off: most draws never meet the target (their asymptote misses it), or the median is past the cap;
  * too uncertain: high / low > `max_interval_ratio`, the high bound at the cap (`max_seconds`) where some draws
    never meet the target;
  * past the schedule: the crossing lies after `horizon_seconds`, where the run's schedule ends it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

LEVEL = 0.8  # of the interval
DRAWS = 2000
N_EFF = 10  # evaluations that count as independent in the weights (successive ones are correlated)
_THETAS = np.geomspace(0.05, 4.0, 120)  # power-law exponents
_NEVER = 1e300  # a crossing time standing for never
_TAUS = np.geomspace(0.02, 20.0, 120)  # time constants, in units of the curve's span


@dataclass(frozen=True)
class Prediction:
    """A predicted TTA (train seconds) with its 80% interval, or no number and the reason (`note`)."""

    seconds: float | None
    low_seconds: float | None
    high_seconds: float | None
    note: str  # what the prediction rests on, or why there is none
    # the ensemble's best single fit, for drawing: (family, shape, c, a, sign, offset)
    fit: tuple | None = None

    @property
    def ok(self) -> bool:
        return self.seconds is not None

    @property
    def source(self) -> str:
        """`autospeed.tta_source` of a run that did not reach: `predicted` or `none`."""
        return "predicted" if self.ok else "none"

    def describe(self) -> str:
        """`~412 s [300-560]`, or `no prediction (flat)`."""
        if not self.ok:
            return f"no prediction ({self.note})"
        return format_predicted(self.seconds, self.low_seconds, self.high_seconds)

    def curve(self, seconds: Sequence[float]) -> list[float]:
        """The best fit's metric values at these train seconds (for the report's extrapolation)."""
        if self.fit is None:
            return [math.nan for _ in seconds]
        family, shape, c, a, sign, offset = self.fit
        x = np.maximum(np.asarray(seconds, float) - offset, 1e-9)
        return list(sign * (c + a * _phi(family, shape, x)))


def format_predicted(seconds: float, low: float | None, high: float | None) -> str:
    """How every output shows a predicted TTA: `~412 s [300-560]` (the ~ and the interval mark a prediction)."""
    inside = f" [{_g(low)}-{_g(high)}]" if low is not None and high is not None else ""
    return f"~{_g(seconds)} s{inside}"


def _g(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def none(note: str) -> Prediction:
    return Prediction(None, None, None, note)


def _phi(family: str, shape: float, x: np.ndarray) -> np.ndarray:
    if family in ("power", "bounded"):
        return x ** -shape
    if family == "exponential":
        return np.exp(-x / shape)
    if family == "hyperbolic":
        return 1.0 / (1.0 + x / shape)
    return -np.log(x)  # log


def _crossing(family: str, shape: float, r: np.ndarray) -> np.ndarray:
    """x where phi(x) = r (inf where phi never reaches r, i.e. the asymptote misses the target)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if family == "log":
            return np.exp(-r)
        out = np.full(r.shape, np.inf)
        pos = r > 0
        if family in ("power", "bounded"):
            out[pos] = r[pos] ** (-1.0 / shape)
        elif family == "exponential":
            out[pos] = -shape * np.log(r[pos])
        else:
            out[pos] = shape * (1.0 / r[pos] - 1.0)
        return out


def _hypotheses(span: float) -> list[tuple[str, float]]:
    return ([("power", th) for th in _THETAS] + [("exponential", tau * span) for tau in _TAUS]
            + [("hyperbolic", tau * span) for tau in _TAUS] + [("log", 0.0)])


def predict_tta(train_seconds: Sequence[float], values: Sequence[float], target: float, mode: str = "max", *,
                min_points: int = 5, max_interval_ratio: float = 4.0, offset_seconds: float = 0.0,
                horizon_seconds: float | None = None, max_seconds: float | None = None, seed: int = 0) -> Prediction:
    """Predict when the curve (`values` of the target metric at `train_seconds`, in evaluation order) meets
    `target` in direction `mode`. `offset_seconds`: train seconds before learning starts (compile, first
    step), kept out of the fit and added back. `horizon_seconds`: where the run's schedule ends it.
    `max_seconds`: the cap; a high bound past it (draws that never meet the target) is shown at the cap."""
    t = np.asarray(train_seconds, float)
    v = np.asarray(values, float)
    if len(t) < min_points:
        return none(f"too few evaluations ({len(t)} < {min_points})")
    if not np.all(np.isfinite(v)):
        return none("diverging: a value is not finite")
    sign = -1.0 if mode == "max" else 1.0  # y falls as the run improves
    y, y_target = sign * v, sign * target
    x = np.maximum(t - offset_seconds, 1e-6)
    n = len(x)

    # diverging: the last third worse than the best fit allows; flat: no improvement beyond the noise
    third = max(3, n // 3)
    noise = _noise(y)
    if np.mean(y[-third:]) - np.min(_smooth(y)) > 3 * noise + 0.02 * abs(np.ptp(y)) and _slope(x[-third:], y[-third:]) > 0:
        return none("diverging: the last evaluations got worse")
    if np.mean(y[:third]) - np.mean(y[-third:]) < 2 * noise:
        return none("flat: no improvement beyond the noise")

    hyps = _hypotheses(float(x[-1]))
    phis = np.stack([_phi(family, shape, x) for family, shape in hyps])  # (hypotheses, n)
    c_all, a_all, spread = _fit_all(phis, y)
    sse_all = ((y[None, :] - c_all[:, None] - a_all[:, None] * phis) ** 2).sum(axis=1)
    floor = _floor(y, mode)  # the best value the metric can take, in y: asymptotes beyond it are impossible
    keep = np.isfinite(a_all) & np.isfinite(c_all) & (a_all > 0) & (spread > 0) & np.isfinite(sse_all)
    if floor is not None:
        keep &= c_all >= floor
    if not keep.any():
        return none("flat: no improving model fits")
    fits = [(hyps[i][0], hyps[i][1], np.array([c_all[i], a_all[i]]), max(float(sse_all[i]), 1e-300),
             np.column_stack([np.ones(n), phis[i]])) for i in np.flatnonzero(keep)]
    if floor is not None:  # a power law down to the metric's bound (a loss to 0, an error rate to 0): never levels off
        for theta in _THETAS:
            phi = x ** -theta
            a = float(phi @ (y - floor) / (phi @ phi))
            if a > 0:
                resid = y - floor - a * phi
                fits.append(("bounded", theta, np.array([floor, a]), max(float(resid @ resid), 1e-300), phi[:, None]))
    sse = np.array([f[3] for f in fits])
    family_count = {f: sum(1 for g in fits if g[0] == f) for f in {g[0] for g in fits}}
    # each family weighs alike; successive evaluations are correlated, so they count as at most N_EFF
    log_w = -0.5 * min(n, N_EFF) * np.log(sse) - np.log([family_count[f[0]] for f in fits])
    w = np.exp(log_w - log_w.max())
    w /= w.sum()

    rng = np.random.default_rng(seed)
    picks = rng.choice(len(fits), size=DRAWS, p=w)
    crossings = np.empty(DRAWS)
    for i in np.unique(picks):
        family, shape, beta, s, X = fits[i]
        m = int(np.sum(picks == i))
        if family == "bounded":  # c is the bound itself: only a varies
            draws = np.column_stack([np.full(m, beta[0]), rng.normal(beta[1], math.sqrt(s / max(n - 1, 1) / float(X[:, 0] @ X[:, 0])), m)])
        else:
            cov = s / max(n - 2, 1) * np.linalg.pinv(X.T @ X)
            draws = rng.multivariate_normal(beta, cov, size=m, method="svd")
        c, a = draws[:, 0], draws[:, 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(a > 0, (y_target - c) / a, -np.inf)
        crossing = _crossing(family, shape, r)
        if floor is not None:
            crossing[c < floor] = np.nan  # an impossible asymptote: the draw is dropped
        crossings[picks == i] = crossing
    crossings = crossings[~np.isnan(crossings)]
    if len(crossings) < DRAWS // 4:
        return none("too uncertain: most fits need an impossible value of the metric")
    crossings = np.maximum(crossings, x[-1])  # it had not met the target by its last evaluation
    never_meet = ~np.isfinite(crossings)
    # quantiles over finite stand-ins (numpy's interpolation between two infinities is NaN), then back to inf
    low, mid, high = (math.inf if q >= _NEVER else float(q) for q in
                      np.quantile(np.where(never_meet, _NEVER, crossings), [(1 - LEVEL) / 2, 0.5, (1 + LEVEL) / 2]))
    best = fits[int(np.argmax(w))]
    fit = (best[0], best[1], float(best[2][0]), float(best[2][1]), sign, offset_seconds)
    never = float(np.mean(never_meet))
    if not np.isfinite(mid):
        return Prediction(None, None, None, f"levels off before the target in {never:.0%} of the fits", fit)
    low, mid, high = (float(q) + offset_seconds for q in (low, mid, high))
    cap = math.inf if max_seconds is None else max_seconds
    if mid > cap:
        return Prediction(None, None, None, f"past the cap: ~{_g(mid)} s is above {_g(cap)} s", fit)
    high = min(high, cap)
    if not math.isfinite(high) or high / low > max_interval_ratio:
        shown = f"{_g(low)}-{_g(high)} s" if math.isfinite(high) else f"from {_g(low)} s, {never:.0%} never meet it"
        return Prediction(None, None, None, f"too uncertain: 80% interval {shown}, wider than "
                                            f"{max_interval_ratio:g}x", fit)
    if horizon_seconds is not None and mid > horizon_seconds:
        return Prediction(None, None, None, f"past the schedule: it ends the run at ~{_g(horizon_seconds)} s, "
                                            f"before the predicted ~{_g(mid)} s", fit)
    return Prediction(mid, low, high, f"extrapolated from {n} evaluations", fit)


def _fit_all(phis: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every hypothesis' least-squares c and a at once (simple regression of y on phi), and phi's spread."""
    phi_mean = phis.mean(axis=1, keepdims=True)
    centred = phis - phi_mean
    spread = (centred ** 2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = (centred @ (y - y.mean())) / spread
    return y.mean() - a * phi_mean[:, 0], a, spread


def _floor(y: np.ndarray, mode: str) -> float | None:
    """The bound of the falling quantity y: a maximised metric seen within [0, 1] (an accuracy) cannot pass 1,
    a minimised one seen non-negative (a loss) cannot go below 0; None where the values say nothing."""
    if mode == "max" and np.all((-y >= 0) & (-y <= 1)):
        return -1.0
    if mode == "min" and np.all(y >= 0):
        return 0.0
    return None


def _noise(y: np.ndarray) -> float:
    """The curve's evaluation noise: the spread of its second differences (robust to a curving trend, which
    inflates the spread of first differences several times: a power law, a loss that turns upward)."""
    d = np.diff(y, 2)
    if len(d) < 2:
        return 0.0
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(6))


def _smooth(y: np.ndarray, k: int = 3) -> np.ndarray:
    if len(y) < k:
        return y
    return np.convolve(y, np.ones(k) / k, mode="valid")


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.polyfit(x, y, 1)[0]) if len(x) >= 2 else 0.0
