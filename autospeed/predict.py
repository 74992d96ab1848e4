"""Predicted time to target: where a trial's evaluation curve would meet the target, with an 80% interval
(docs/design.md "Long jobs: predicted time to target"). numpy only.

The curve is the target metric against train seconds, turned into a quantity y that falls as the run improves
(a loss as it is, an accuracy negated). Two ways to extrapolate it; each is fitted to the curve's first 2/3 and
the one that forecasts its last third better predicts (model selection by forecast, per curve):

  * the ensemble of saturating learning-curve families, each `y = c + a * phi(x)` with `a > 0` and one shape
    parameter on a grid (Domhan et al. 2015's families, fitted the fast way: for a fixed shape the model is
    linear in c and a), every (family, shape) weighted by its profile likelihood (tempered: successive
    evaluations are correlated), Laplace draws of c and a:
        power        phi = x ** -theta              (pow3)
        exponential  phi = exp(-x / tau)            (exp3)
        hyperbolic   phi = 1 / (1 + x / tau)        (MMF with delta 1)
        log          phi = -log(x)                  (log-linear: never saturates)
  * where the metric has a bound (a loss >= 0, an accuracy <= 1: `_floor`), a power law of the distance to it
    over the curve's later half (`log(y - bound)` linear in `log x`), with the regression's normal draws. On
    mnist1d's accuracy curves the saturating families fitted to the first fast rise "level off" below targets
    the runs go on to meet; the distance to the bound keeps falling as a power of the seconds.

Draws give crossing times; their 10th, 50th and 90th percentiles are the prediction. Draws whose asymptote
never meets the target cross at infinity; draws needing an impossible asymptote (an accuracy above 1) are dropped.
How well this ranks and covers on real curves: experiments/results/long_job.md.

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
FORECAST_SPLIT = 2 / 3  # the share of a curve each method is fitted to before it forecasts the rest
TAIL_FROM = 0.5  # the power law to the bound is fitted to the evaluations after this share of the seconds
TAIL_N_EFF = 5  # the later half's evaluations that count as independent in the power law's uncertainty
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
    return f"{x:.2g}" if x >= 1e6 else f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def none(note: str) -> Prediction:
    return Prediction(None, None, None, note)


def _phi(family: str, shape: float, x: np.ndarray) -> np.ndarray:
    if family in ("power", "tail"):
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
        if family in ("power", "tail"):
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
    worse_than_best = np.mean(y[-third:]) - np.min(_smooth(y)) > 3 * noise + 0.02 * abs(np.ptp(y))
    if worse_than_best and _slope(x[-third:], y[-third:]) > 0:
        return none("diverging: the last evaluations got worse")
    if np.mean(y[:third]) - np.mean(y[-third:]) < 2 * noise:
        return none("flat: no improvement beyond the noise")

    floor = _floor(y, mode)  # the best value the metric can take, in y: asymptotes beyond it are impossible
    rng = np.random.default_rng(seed)
    # two ways to extrapolate, chosen per curve by how well each, fitted to the curve's first 2/3, forecasts
    # its last third: the ensemble of saturating families, and (where the metric has a bound) a power law of
    # the distance to the bound over the curve's later half
    methods = [_ensemble] + ([_tail_power] if floor is not None else [])
    head = x <= FORECAST_SPLIT * x[-1]
    if len(methods) > 1 and head.sum() >= min_points and (~head).sum() >= 2:
        errors = []
        for method in methods:
            fitted = method(x[head], y[head], y_target, floor, None)
            errors.append(np.inf if fitted is None else float(np.mean((fitted(x[~head]) - y[~head]) ** 2)))
        methods = [methods[int(np.argmin(errors))]]
    drawn = methods[0](x, y, y_target, floor, rng)
    if drawn is None:
        return none("flat: no improving model fits")
    crossings, fit = drawn
    fit = (*fit, sign, offset_seconds)
    crossings = crossings[~np.isnan(crossings)]
    if len(crossings) < DRAWS // 4:
        return none("too uncertain: most fits need an impossible value of the metric")
    crossings = np.maximum(crossings, x[-1])  # it had not met the target by its last evaluation
    never_meet = ~np.isfinite(crossings)
    # quantiles over finite stand-ins (numpy's interpolation between two infinities is NaN), then back to inf
    low, mid, high = (math.inf if q >= _NEVER else float(q) for q in
                      np.quantile(np.where(never_meet, _NEVER, crossings), [(1 - LEVEL) / 2, 0.5, (1 + LEVEL) / 2]))
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
    how = "a power law to the metric's bound" if fit[0] == "tail" else "the ensemble"
    return Prediction(mid, low, high, f"extrapolated from {n} evaluations by {how}", fit)


def _ensemble(x: np.ndarray, y: np.ndarray, y_target: float, floor: float | None, rng):
    """The saturating families, each hypothesis weighted by its profile likelihood. Without `rng`: the best
    hypothesis' curve (a function of x), for the forecast check; with it: (crossing draws, best fit)."""
    n = len(x)
    hyps = _hypotheses(float(x[-1]))
    phis = np.stack([_phi(family, shape, x) for family, shape in hyps])  # (hypotheses, n)
    c_all, a_all, spread = _fit_all(phis, y)
    sse_all = ((y[None, :] - c_all[:, None] - a_all[:, None] * phis) ** 2).sum(axis=1)
    keep = np.isfinite(a_all) & np.isfinite(c_all) & (a_all > 0) & (spread > 0) & np.isfinite(sse_all)
    if floor is not None:
        keep &= c_all >= floor
    if not keep.any():
        return None
    fits = [(hyps[i][0], hyps[i][1], np.array([c_all[i], a_all[i]]), max(float(sse_all[i]), 1e-300),
             np.column_stack([np.ones(n), phis[i]])) for i in np.flatnonzero(keep)]
    sse = np.array([f[3] for f in fits])
    family_count = {f: sum(1 for g in fits if g[0] == f) for f in {g[0] for g in fits}}
    # each family weighs alike; successive evaluations are correlated, so they count as at most N_EFF
    log_w = -0.5 * min(n, N_EFF) * np.log(sse) - np.log([family_count[f[0]] for f in fits])
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    best = fits[int(np.argmax(w))]
    if rng is None:
        return lambda xs: best[2][0] + best[2][1] * _phi(best[0], best[1], np.asarray(xs, float))
    picks = rng.choice(len(fits), size=DRAWS, p=w)
    crossings = np.empty(DRAWS)
    for i in np.unique(picks):
        family, shape, beta, s, X = fits[i]
        m = int(np.sum(picks == i))
        cov = s / max(n - 2, 1) * np.linalg.pinv(X.T @ X)
        draws = rng.multivariate_normal(beta, cov, size=m, method="svd")
        c, a = draws[:, 0], draws[:, 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(a > 0, (y_target - c) / a, -np.inf)
        crossing = _crossing(family, shape, r)
        if floor is not None:
            crossing[c < floor] = np.nan  # an impossible asymptote: the draw is dropped
        crossings[picks == i] = crossing
    return crossings, (best[0], best[1], float(best[2][0]), float(best[2][1]))


def _tail_power(x: np.ndarray, y: np.ndarray, y_target: float, floor: float, rng):
    """log(y - floor) linear in log(x) over the later half of the curve: the distance to the metric's bound
    (a loss's 0, an error rate's 0) falling as a power of the train seconds, which never levels off above the
    target. The regression's normal posterior gives the draws. Without `rng`: the fitted curve."""
    tail = x >= TAIL_FROM * x[-1]
    if tail.sum() < 3:
        return None
    lx, ly = np.log(x[tail]), np.log(np.maximum(y[tail] - floor, 1e-12))
    A = np.column_stack([np.ones_like(lx), lx])
    beta, *_ = np.linalg.lstsq(A, ly, rcond=None)
    if not np.all(np.isfinite(beta)) or beta[1] >= 0:
        return None  # not falling towards the bound
    fit = ("tail", float(-beta[1]), floor, float(math.exp(beta[0])))
    if rng is None:
        return lambda xs: floor + math.exp(beta[0]) * np.asarray(xs, float) ** beta[1]
    resid = ly - A @ beta
    # successive evaluations are correlated: the fit's uncertainty is that of at most TAIL_N_EFF independent points
    inflate = max(1.0, len(lx) / TAIL_N_EFF)
    cov = inflate * float(resid @ resid) / max(len(lx) - 2, 1) * np.linalg.pinv(A.T @ A)
    draws = rng.multivariate_normal(beta, cov, size=DRAWS, method="svd")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_x = (math.log(max(y_target - floor, 1e-12)) - draws[:, 0]) / draws[:, 1]
        crossings = np.where(draws[:, 1] < 0, np.exp(np.minimum(log_x, 700.0)), np.inf)
    return crossings, fit


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
