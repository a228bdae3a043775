"""verdicts.py — the statistics behind a claim's verdict: paired and Welch intervals, the
equivalence (TOST), non-inferiority and superiority rules at a margin fixed in advance, the seeds
a decision needs, and Fisher's exact test on divergence counts.

Pure standard library (report.py runs in CI without SciPy): Student's t comes from the
regularized incomplete beta function, inverted by bisection. tests/integration/test_claims_rules.sh checks it
against tabulated quantiles and every rule against constructed data with known answers.

Sign convention: d = a - b in "better" units (d > 0: a is better), so a lower-is-better metric
is negated before it gets here.
"""
import math
import statistics

LEVEL = 0.90          # two-sided interval; each one-sided bound is at 95%
POWER = 0.80          # the power "seeds needed" is computed for
MAX_SEEDS = 10000     # past this the seeds needed are reported as "more than"


# ---- Student's t ----

def _betacf(a, b, x):
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a, b, x):
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + \
        b * math.log(1.0 - x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def t_ppf(p, df):
    """The p-quantile of Student's t with df degrees of freedom (df > 0, 0 < p < 1)."""
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


# ---- intervals ----

class Interval:
    """d with its two-sided LEVEL interval [lo, hi] (each end a one-sided 95% bound), the
    spread it came from and how: `kind` is "paired" (sd of the differences, n pairs) or
    "welch" (sd pooled over the two methods, n = the smaller arm)."""

    def __init__(self, kind, d, lo, hi, sd, n, df):
        self.kind, self.d, self.lo, self.hi, self.sd, self.n, self.df = kind, d, lo, hi, sd, n, df


def paired(diffs, level=LEVEL):
    n = len(diffs)
    if n < 2:
        return None
    d = statistics.fmean(diffs)
    sd = statistics.stdev(diffs)
    half = t_ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return Interval("paired", d, d - half, d + half, sd, n, n - 1)


def welch(a, b, level=LEVEL):
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return None
    va, vb = statistics.variance(a), statistics.variance(b)
    d = statistics.fmean(a) - statistics.fmean(b)
    se2 = va / na + vb / nb
    if se2 == 0:
        df = na + nb - 2
    else:
        df = se2 * se2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    half = t_ppf(0.5 + level / 2, df) * math.sqrt(se2)
    return Interval("welch", d, d - half, d + half, math.sqrt((va + vb) / 2), min(na, nb), df)


# ---- the rules ----

def decide(test, iv, delta):
    """holds / fails / not shown for `same`, `not_worse` and `worse` on interval iv (d > 0: a is
    better) at margin delta > 0 (for `worse`: the smallest loss the paper's effect stands for).

      same       holds: (lo, hi) inside (-delta, delta);  fails: wholly outside it
      not_worse  holds: lo > -delta;                      fails: hi < -delta
      worse      holds: hi < 0 (a is worse);              fails: lo > -delta (any loss is
                 smaller than the effect)
    """
    lo, hi = iv.lo, iv.hi
    if test == "same":
        if -delta < lo and hi < delta:
            return "holds"
        if lo > delta or hi < -delta:
            return "fails"
        return "not shown"
    if test == "not_worse":
        if lo > -delta:
            return "holds"
        if hi < -delta:
            return "fails"
        return "not shown"
    if test == "worse":
        if hi < 0:
            return "holds"
        if lo > -delta:
            return "fails"
        return "not shown"
    raise ValueError(f"unknown test '{test}'")


def _gaps(test, d, delta):
    """How far the observed d lies from each boundary a decision must clear, for the outcomes
    still possible at that d (an outcome that needs d on the other side is never reached)."""
    if test == "same":
        return [delta - abs(d)] if abs(d) < delta else [abs(d) - delta]
    if test == "not_worse":
        return [d + delta] if d > -delta else [-delta - d]
    if test == "worse":
        g = []
        if d < 0:
            g.append(-d)
        if d > -delta:
            g.append(d + delta)
        return g
    raise ValueError(f"unknown test '{test}'")


def seeds_needed(test, iv, delta, power=POWER, level=LEVEL):
    """The seeds (pairs, or runs per method for Welch) at which a decision has `power` if the
    true difference is the observed d and the spread the observed one: the smallest n with
    (t_{level} + t_{power}) * se(n) <= the gap to the nearest boundary. None: more than
    MAX_SEEDS (or the gap is zero)."""
    gaps = [g for g in _gaps(test, iv.d, delta) if g > 0]
    if not gaps:
        return None
    if iv.sd == 0:
        return 2
    g = max(gaps)
    factor = 1.0 if iv.kind == "paired" else math.sqrt(2.0)
    for n in range(2, MAX_SEEDS + 1):
        df = n - 1 if iv.kind == "paired" else 2 * n - 2
        need = (t_ppf(0.5 + level / 2, df) + t_ppf(power, df)) * factor * iv.sd / math.sqrt(n)
        if need <= g:
            return n
    return None


# ---- divergence ----

def fisher_exact(div_a, n_a, div_b, n_b):
    """One-sided p of Fisher's exact test that a diverges more often than b: the probability,
    with the margins fixed, of a table with at least div_a divergences in a's row."""
    k = div_a + div_b
    n = n_a + n_b
    if k == 0 or k == n:
        return 1.0
    total = math.comb(n, k)
    return sum(math.comb(n_a, x) * math.comb(n_b, k - x)
               for x in range(div_a, min(n_a, k) + 1)) / total
