#!/usr/bin/env python3
"""Writes golden_tables.json: frequency tables built by an independent Python mirror
of codec/entropy (det_math, pmf, normalize, table_builder).

Python floats are IEEE doubles and every operation below is written in the same
order as the C++ code, so the two implementations must agree bit for bit; the C++
test tests/codec/entropy/golden_tables_test.cc rebuilds every table and compares. A change
in the table-building algorithm shows up as a diff of this file (regenerate with
`python3 tests/codec/entropy/data/gen_golden_tables.py`, standard library only).
"""

import heapq
import json
import math
import os

INV_LN2 = 1.44269504088896338700e00
LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10
TWO_OVER_SQRT_PI = 1.12837916709551257390e00
INV_SQRT_PI = 5.64189583547756286948e-01
INV_SQRT2 = 7.07106781186547524401e-01


def det_exp(x):
    if x != x:
        return x
    if x < -745.0:
        return 0.0
    if x > 709.0:
        return math.inf
    k = math.floor(x * INV_LN2 + 0.5)
    r = (x - k * LN2_HI) - k * LN2_LO
    s = 1.0
    for n in range(17, 0, -1):
        s = 1.0 + r * s / n
    return math.ldexp(s, int(k))


def det_erfc(z):
    if z < 0.0:
        return 2.0 - det_erfc(-z)
    if z < 2.5:
        z2 = z * z
        term = z
        total = z
        for n in range(1, 70):
            term = -term * z2 / n
            total = total + term / (2 * n + 1)
        return 1.0 - TWO_OVER_SQRT_PI * total
    f = z
    for n in range(80, 0, -1):
        f = z + (0.5 * n) / f
    return det_exp(-(z * z)) * INV_SQRT_PI / f


def symbol_value(v, bits, mapping):
    if mapping == "twos" and v >= (1 << (bits - 1)):
        return v - (1 << bits)
    return v


def laplace_cell(lo, hi, mu, b):
    if hi <= mu:
        return 0.5 * (det_exp((hi - mu) / b) - det_exp((lo - mu) / b))
    if lo >= mu:
        return 0.5 * (det_exp(-(lo - mu) / b) - det_exp(-(hi - mu) / b))
    return 1.0 - 0.5 * det_exp(-(mu - lo) / b) - 0.5 * det_exp(-(hi - mu) / b)


def upper_tail(z):
    return 0.5 * det_erfc(z * INV_SQRT2)


def gaussian_cell(lo, hi, mu, sigma):
    zl = (lo - mu) / sigma
    zh = (hi - mu) / sigma
    if zl >= 0.0:
        return upper_tail(zl) - upper_tail(zh)
    if zh <= 0.0:
        return upper_tail(-zh) - upper_tail(-zl)
    return 1.0 - upper_tail(-zl) - upper_tail(zh)


def integrate(bits, mapping, cell):
    out = []
    for v in range(1 << bits):
        c = float(symbol_value(v, bits, mapping))
        m = cell(c - 0.5, c + 0.5)
        out.append(m if m > 0.0 else 0.0)
    return out


def laplace_pmf(bits, mapping, mu, b):
    return integrate(bits, mapping, lambda lo, hi: laplace_cell(lo, hi, mu, b))


def gaussian_pmf(bits, mapping, mu, sigma):
    return integrate(bits, mapping, lambda lo, hi: gaussian_cell(lo, hi, mu, sigma))


def mixture_pmf(bits, mapping, components):
    pmf = [0.0] * (1 << bits)
    for w, mu, sigma in components:
        part = gaussian_pmf(bits, mapping, mu, sigma)
        pmf = [pmf[v] + w * part[v] for v in range(len(pmf))]
    return pmf


def mix_pmfs(a, wa, b, wb):
    return [wa * a[v] + wb * b[v] for v in range(len(a))]


def histogram_pmf(counts):
    total = float(sum(counts))
    return [float(c) / total for c in counts]


def normalize(weights, precision):
    n = len(weights)
    total = 1 << precision
    s = 0.0
    for w in weights:
        s = s + w
    m = float(total)
    target = [(w / s) * m for w in weights]
    f = [max(1, int(math.floor(t))) for t in target]
    d = total - sum(f)
    if d > 0:
        order = sorted(range(n), key=lambda i: -(target[i] - float(f[i])))  # stable
        for k in range(d):
            f[order[k]] += 1
    elif d < 0:
        heap = [(target[i] / f[i], i) for i in range(n) if f[i] >= 2]
        heapq.heapify(heap)
        while d < 0:
            _, i = heapq.heappop(heap)
            f[i] -= 1
            if f[i] >= 2:
                heapq.heappush(heap, (target[i] / f[i], i))
            d += 1
    return f


def select_range(q, tau):
    n = len(q)
    kept = [v for v in range(n) if q[v] >= tau]
    if not kept:
        best = 0
        for v in range(1, n):
            if q[v] > q[best]:
                best = v
        kept = [best]
    best_gap, best_after = 0, 0
    for i in range(len(kept)):
        nxt = kept[(i + 1) % len(kept)]
        gap = (nxt - kept[i] + n - 1) % n
        if gap > best_gap:
            best_gap, best_after = gap, i
    if best_gap == 0:
        return 0, n
    return kept[(best_after + 1) % len(kept)], n - best_gap


def build_table(pmf, precision):
    n = len(pmf)
    bits = n.bit_length() - 1
    s = 0.0
    for p in pmf:
        s = s + p
    q = [p / s for p in pmf]
    slots = float(1 << precision)
    tau = 3.0 / (2.0 * slots * float(bits + precision))
    first, size = select_range(q, tau)
    while size + (1 if size < n else 0) > (1 << precision):
        tau = tau * 2.0
        first, size = select_range(q, tau)
    inside = set()
    weights = []
    for d in range(size):
        v = (first + d) % n
        inside.add(v)
        weights.append(q[v])
    full = size == n
    if not full:
        outside = 0.0
        for v in range(n):
            if v not in inside:
                outside = outside + q[v]
        weights.append(outside)
    freqs = normalize(weights, precision)
    escape = 0
    if not full:
        escape = freqs.pop()
    return {"precision": precision, "symbol_bits": bits, "first": first, "escape": escape, "freqs": freqs}


def histogram_counts(bits):
    # A fixed, skewed histogram (not random): counts fall off from symbol 0 and a
    # few symbols are empty.
    return [0 if v % 5 == 3 else (1000000 >> min(20, v // 3)) + v % 7 for v in range(1 << bits)]


def specs():
    out = []
    for b in (0.3, 1.0, 4.0, 20.0):
        for p in (10, 12, 15):
            out.append(
                {
                    "kind": "laplace",
                    "symbol_bits": 8,
                    "mapping": "twos",
                    "mu": 0.0,
                    "scale": b,
                    "precision": p,
                }
            )
    out.append(
        {
            "kind": "laplace",
            "symbol_bits": 8,
            "mapping": "unsigned",
            "mu": 100.25,
            "scale": 7.5,
            "precision": 12,
        }
    )
    out.append(
        {"kind": "laplace", "symbol_bits": 16, "mapping": "twos", "mu": 0.0, "scale": 50.0, "precision": 15}
    )
    out.append(
        {
            "kind": "laplace",
            "symbol_bits": 1,
            "mapping": "unsigned",
            "mu": 0.0,
            "scale": 0.25,
            "precision": 10,
        }
    )
    for sigma in (0.5, 2.0, 10.0):
        for mu in (0.0, 0.3):
            for p in (11, 14):
                out.append(
                    {
                        "kind": "gaussian",
                        "symbol_bits": 8,
                        "mapping": "twos",
                        "mu": mu,
                        "scale": sigma,
                        "precision": p,
                    }
                )
    out.append(
        {"kind": "gaussian", "symbol_bits": 12, "mapping": "twos", "mu": -3.5, "scale": 30.0, "precision": 13}
    )
    out.append(
        {
            "kind": "mixture",
            "symbol_bits": 8,
            "mapping": "twos",
            "components": [[0.95, 0.0, 2.0], [0.03, 0.0, 6.0]],
            "histogram_weight": 0.02,
            "precision": 12,
        }
    )
    out.append({"kind": "histogram", "symbol_bits": 6, "precision": 10})
    out.append({"kind": "histogram", "symbol_bits": 6, "precision": 15})
    return out


def pmf_of(spec):
    bits = spec["symbol_bits"]
    if spec["kind"] == "laplace":
        return laplace_pmf(bits, spec["mapping"], spec["mu"], spec["scale"])
    if spec["kind"] == "gaussian":
        return gaussian_pmf(bits, spec["mapping"], spec["mu"], spec["scale"])
    if spec["kind"] == "mixture":
        core = mixture_pmf(bits, spec["mapping"], spec["components"])
        marginal = histogram_pmf(histogram_counts(bits))
        return mix_pmfs(core, 1.0, marginal, spec["histogram_weight"])
    return histogram_pmf(histogram_counts(bits))


def main():
    tables = []
    for spec in specs():
        row = dict(spec)
        row["table"] = build_table(pmf_of(spec), spec["precision"])
        tables.append(row)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_tables.json")
    with open(path, "w") as f:
        json.dump(
            {"generator": "tests/codec/entropy/data/gen_golden_tables.py", "tables": tables},
            f,
            indent=None,
            separators=(",", ":"),
        )
        f.write("\n")
    print(f"wrote {len(tables)} tables to {path}")


if __name__ == "__main__":
    main()
