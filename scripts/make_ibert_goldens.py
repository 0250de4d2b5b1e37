#!/usr/bin/env python3
"""Writes tests/kernels/data/ibert_goldens.json: inputs and exact expected integer outputs of
I-BERT's integer-only GELU, softmax and LayerNorm, for stile's bit-exact tests
(tests/kernels/test_int_ops.cpp against include/stile/kernels/ibert_*.hpp).

A transcription, in NumPy and Python integers, of the reference implementation's integer mode:
kssteven418/I-BERT, fairseq/quantization/utils/quant_modules.py, classes IntGELU (int_erf,
forward), IntSoftmax (int_polynomial, int_exp, forward, with its QuantAct(16)) and IntLayerNorm
(forward, set_shift, overflow_fallback); quant_utils.py batch_frexp, fixedpoint_mul,
symmetric_linear_quantization_params. No torch.

Where torch's float32 arithmetic matters, and what this script does there:
  1. The per-call integer constants (b_int, c_int, x0_int, shift_int, factor, bias_int) and the
     scales are float32 results floored; one ulp changes a floor. They are reproduced with
     np.float32 operation by operation, as PyTorch computes them on CUDA (the reference calls
     .cuda()): tensor / python_scalar is tensor * float32(1 / float32(scalar))
     (div_true_kernel_cuda multiplies by the reciprocal), python_scalar / tensor is
     tensor.reciprocal() * scalar (torch.Tensor.__rdiv__), tensor ** 2 is t * t.
  2. The element-wise values (squares, products, shifted exponentials, row sums, sums of squares)
     are integers that the reference carries in float32 tensors: exact below 2^24, rounded above.
     The paper's integer-only deployment, and stile's kernels, compute them exactly; so does this
     script (Python integers). `--float32-report` also runs the reference's float32 simulation of
     those steps and prints how many golden outputs it would change (the scales chosen for BERT's
     16-bit activations keep most of them below 2^24).
  3. IntSoftmax hands the integers exp_int themselves to QuantAct(16) (not exp_int times their
     scale), so QuantAct's scale act = max(exp_int) / 32767 = c_int 2^30 / 32767 and its result
     is round(exp_int / act); the reference forms it through float32 exp_int / exp_scale and a
     float64 multiply. Here: one exact dyadic multiply, exp_int * batch_frexp(1 / act), rounded
     half to even (torch.round), clamped to [-32768, 32767] (fixedpoint_mul, bit_num 16).
  4. IntLayerNorm's square root: the reference's torch.sqrt of float32 is replaced by the exact
     integer square root (the paper's Algorithm 4, the reference's own comment "To be replaced with
     integer-sqrt kernel that produces the same output").

Run (NumPy only; Python 3.9+):
    python3 -m venv .venv-goldens && .venv-goldens/bin/pip install numpy
    .venv-goldens/bin/python scripts/make_ibert_goldens.py [--float32-report]
The output is deterministic (fixed seeds); commit it with the kernels it checks.
"""
import argparse
import json
import math
import os
import struct
from decimal import Decimal, ROUND_HALF_UP

import numpy as np

F32 = np.float32


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", float(F32(v))))[0]


# --- torch float32 operations on CUDA (point 1 above) ------------------------------------------
def div_scalar(t, scalar):  # tensor / python_scalar
    return F32(t) * (F32(1.0) / F32(scalar))


def rdiv(scalar, t):  # python_scalar / tensor
    return (F32(1.0) / F32(t)) * F32(scalar)


def mul_scalar(t, scalar):  # tensor * python_scalar
    return F32(t) * F32(scalar)


def ifloor(v):
    return int(math.floor(float(v)))


# --- quant_utils.py ------------------------------------------------------------------------------
def batch_frexp(x, max_bit=31):
    """batch_frexp: x = m / 2^e with m rounded half up (Decimal ROUND_HALF_UP), as the reference."""
    m, e = math.frexp(x)
    mi = int(Decimal(m * (2 ** max_bit)).quantize(Decimal("1"), rounding=ROUND_HALF_UP))
    return mi, max_bit - e


def round_half_even_shift(v, k):
    """torch.round(v / 2^k) for an exact integer v."""
    if k <= 0:
        return v << (-k)
    q = v >> k
    r = v - (q << k)
    half = 1 << (k - 1)
    if r > half or (r == half and (q & 1)):
        q += 1
    return q


def round_half_even_div(num, den):
    q, r = divmod(num, den)
    if 2 * r > den or (2 * r == den and (q & 1)):
        q += 1
    return q


# --- IntGELU (quant_modules.py, class IntGELU) ---------------------------------------------------
def int_gelu(x_int, s):
    k, n = 1.4142, 14  # self.k, self.n
    coeff = [-0.2888, -1.769, 1.0]
    coeff[2] /= coeff[0]  # a(x+b)**2 + c, c divided by a in __init__
    s_erf = div_scalar(s, k)  # forward: self.int_erf(x_int, scaling_factor / self.k)
    b_int = ifloor(rdiv(coeff[1], s_erf))  # int_erf: torch.floor(self.coeff[1] / scaling_factor)
    s_erf2 = s_erf * s_erf
    c_int = ifloor(rdiv(coeff[2], s_erf2))  # torch.floor(self.coeff[2] / scaling_factor ** 2)
    s_sig = mul_scalar(s_erf2, coeff[0])  # scaling_factor ** 2 * self.coeff[0]
    s_sig = mul_scalar(s_sig, 2.0 ** n)  # scaling_factor * 2 ** self.n
    one = ifloor(rdiv(1.0, s_sig))  # forward: shift_int = torch.floor(1. / sigmoid_scaling_factor)
    out_scale = div_scalar(F32(s) * s_sig, 2.0)  # scaling_factor * sigmoid_scaling_factor / 2
    out = []
    for x in x_int:
        sign = (x > 0) - (x < 0)  # torch.sign
        a = min(abs(x), -b_int)  # torch.min(abs_int, -b_int)
        y = sign * ((a + b_int) ** 2 + c_int)
        y = y >> n  # floor_ste(y_int / 2 ** self.n)
        out.append(x * (y + one))  # x_int * (sigmoid_int + shift_int)
    return out, out_scale, (b_int, c_int, one)


def int_gelu_float32(x_int, s):
    """The reference's float32 simulation of the element-wise steps (point 2), for the report."""
    _, _, (b_int, c_int, one) = int_gelu([0], s)
    x = np.array(x_int, dtype=F32)
    a = np.minimum(np.abs(x), F32(-b_int))
    t = a + F32(b_int)
    y = np.sign(x) * (t * t + F32(c_int))
    y = np.floor(y * F32(1.0 / 16384))
    return [int(v) for v in (x * (y + F32(one)))]


# --- IntSoftmax (quant_modules.py, class IntSoftmax) ---------------------------------------------
def int_softmax_params(s):
    x0, n = -0.6931, 30  # self.x0, self.n
    coef = [0.35815147, 0.96963238, 1.0]
    coef[1] /= coef[0]
    coef[2] /= coef[0]
    x0_int = ifloor(rdiv(x0, s))  # int_exp: torch.floor(self.x0 / scaling_factor)
    b_int = ifloor(rdiv(coef[1], s))  # int_polynomial
    c_int = ifloor(rdiv(coef[2], F32(s) * F32(s)))
    # QuantAct(16) on exp_int (point 3): symmetric_linear_quantization_params(16, 0, c_int 2^30)
    act = div_scalar(F32(c_int) * F32(2.0 ** n), 2 ** 15 - 1)
    m, e = batch_frexp(1.0 / float(act))
    return x0_int, b_int, c_int, m, e, act, n


def int_softmax_row(x_row, s, output_bit):
    x0_int, b_int, c_int, m, e, _, n = int_softmax_params(s)
    mx = max(x_row)  # x_int.max(dim=-1)
    e16 = []
    for x in x_row:
        x = max(x - mx, n * x0_int)  # torch.max(x_int, self.n * x0_int)
        q = x // x0_int  # floor_ste(x_int / x0_int)
        r = x - x0_int * q
        z = r * (r + b_int) + c_int  # int_polynomial: x_int * (x_int + b_int) + c_int
        z = max(z, 0)  # torch.clamp(..., min=0) of z * 2^(n - q)
        v = round_half_even_shift(z * m, e - (n - q))  # fixedpoint_mul of exp_int = z 2^(n - q)
        e16.append(min(max(v, -32768), 32767))
    total = sum(e16)  # exp_int.sum(dim=-1)
    factor = ifloor(rdiv(2.0 ** 32, F32(total)))  # floor_ste(2**32 / exp_int_sum)
    return [(v * factor) >> (32 - output_bit) for v in e16], e16


def int_softmax_row_float32(x_row, s, output_bit):
    """The reference's float32 path (points 2 and 3), for the report."""
    x0_int, b_int, c_int, _, _, act, n = int_softmax_params(s)
    x = np.array(x_row, dtype=F32)
    x = x - x.max()
    x = np.maximum(x, F32(n * x0_int))
    q = np.floor(x / F32(x0_int))
    r = x - F32(x0_int) * q
    z = r * (r + F32(b_int)) + F32(c_int)
    exp_int = np.maximum(np.floor(z * np.exp2(F32(n) - q).astype(F32)), F32(0))
    exp_sf = div_scalar(mul_scalar(F32(s) * F32(s), 0.35815147), 2.0 ** n)
    z_int = np.round(exp_int / exp_sf)  # fixedpoint_mul: torch.round(pre_act / pre_act_scaling_factor)
    m, e = batch_frexp(float(exp_sf) / float(act))
    out16 = np.clip(np.round(z_int.astype(np.float64) * m / 2.0 ** e), -32768, 32767).astype(F32)
    exp16 = (out16 * act) / act
    total = exp16.sum(dtype=F32)
    factor = np.floor(rdiv(2.0 ** 32, total))
    return [int(v) for v in np.floor(exp16 * F32(factor) * F32(2.0 ** -(32 - output_bit)))]


# --- IntLayerNorm (quant_modules.py, class IntLayerNorm) -----------------------------------------
def isqrt_newton(v):
    """I-BERT, Algorithm 4: floor(sqrt(v)) by Newton's iteration from 2^ceil(bits/2)."""
    if v == 0:
        return 0
    x = 1 << ((v.bit_length() + 1) // 2)
    while True:
        nxt = (x + v // x) // 2
        if nxt >= x:
            return x
        x = nxt


def needed_shift(v):
    """set_shift: ceil(log2(sqrt(v / 2^32))) for an exact integer v: least k with v <= 2^(2k+32)."""
    k = -16
    while v > (1 << (2 * k + 32)):
        k += 1
    return k


def int_layer_norm(rows, gamma, beta, shift):
    cols = len(rows[0])
    dim_sqrt = np.sqrt(F32(cols))  # torch.sqrt(torch.tensor(C, dtype=torch.float))
    sf = div_scalar(dim_sqrt, 2.0 ** 30)  # self.dim_sqrt / 2**30
    bias_int = [ifloor(F32(F32(b) / F32(g)) / sf) for g, b in zip(gamma, beta)]  # bias / weight / sf
    out_scale = [sf * F32(g) for g in gamma]  # scaling_factor * self.weight
    means = [round_half_even_div(sum(r), cols) for r in rows]  # round_ste(x_int.mean(axis=2))
    ys = [[x - m for x in r] for r, m in zip(rows, means)]
    var = [sum((v >> shift) ** 2 for v in y) for y in ys]  # floor_ste(y_int / 2 ** shift) ** 2
    if max(var) >= 2 ** 32:  # overflow_handling: overflow_fallback -> set_shift
        shift = max(shift, max(needed_shift(sum(v * v for v in y)) for y in ys))
        while True:
            var = [sum((v >> shift) ** 2 for v in y) for y in ys]
            if max(var) < 2 ** 32:
                break
            shift += 1  # the reference asserts here; see ibert_layernorm.hpp
    out = []
    for y, v in zip(ys, var):
        std_int = isqrt_newton(v) << shift  # floor(sqrt(var_int)) * 2 ** self.shift
        factor = ifloor(rdiv(2.0 ** 31, F32(std_int) + F32(0.0001)))  # 2**31 / (std_int + 0.0001)
        out.append([((a * factor) >> 1) + bi for a, bi in zip(y, bias_int)])  # floor(y*factor/2) + bias_int
    return out, out_scale, shift


def int_layer_norm_float32(rows, gamma, beta, shift):
    """The reference's float32 path (points 2 and 4), for the report (shift as found exactly)."""
    cols = len(rows[0])
    dim_sqrt = np.sqrt(F32(cols))
    sf = div_scalar(dim_sqrt, 2.0 ** 30)
    bias_int = np.floor((np.array(beta, F32) / np.array(gamma, F32)) / sf)
    out = []
    for r in rows:
        x = np.array(r, dtype=F32)
        y = x - np.round(x.mean(dtype=F32))
        var = (np.floor(y * F32(2.0 ** -shift)) ** 2).sum(dtype=F32)
        std = np.floor(np.sqrt(var)) * F32(2.0 ** shift)
        factor = np.floor(rdiv(2.0 ** 31, std + F32(0.0001)))
        out.append([int(v) for v in (np.floor(y * factor / F32(2)) + bias_int)])
    return out


# --- cases ---------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "kernels", "data",
                                                  "ibert_goldens.json"))
    ap.add_argument("--float32-report", action="store_true",
                    help="count the golden outputs the reference's float32 simulation would change")
    args = ap.parse_args()
    rng = np.random.default_rng(20210701)
    doc = {"about": "I-BERT integer kernels: inputs and exact outputs; written by scripts/make_ibert_goldens.py",
           "gelu": [], "softmax": [], "layernorm": []}
    report = []

    def diff(exact, approx):  # how many differ, and the largest difference relative to the output's range
        pairs = list(zip(exact, approx))
        top = max(max(abs(a) for a in exact), 1)
        return (f"{sum(a != b for a, b in pairs)} of {len(pairs)} differ, by at most "
                f"{max(abs(a - b) for a, b in pairs) / top:.1e} of the largest |output|")

    # IntGELU: 16-bit inputs at BERT FFN scales (int32 vector path), an 8-bit grid, and fine
    # accumulator scales whose products need 64 bits (scalar path).
    for n, absmax, bits in [(37, 10.0, 16), (64, 4.0, 16), (19, 6.0, 8), (45, 10.0, 22), (23, 3.0, 24)]:
        s = float(F32(absmax / (2 ** (bits - 1) - 1)))
        lim = 2 ** (bits - 1) - 1
        x = [int(v) for v in rng.integers(-lim, lim + 1, size=n)]
        x[:4] = [0, lim, -lim, 1]
        out, so, _ = int_gelu(x, s)
        doc["gelu"].append({"scale_bits": f32_bits(s), "x": x, "y": out, "out_scale_bits": f32_bits(so)})
        if args.float32_report:
            report.append(f"gelu n={n} bits={bits}: {diff(out, int_gelu_float32(x, s))} under float32")

    # IntGELU over scales spread log-uniformly from 1e-6 to 1: the float32 derivation of b_int,
    # c_int and shift_int is where a one-ulp slip would show.
    for _ in range(12):
        s = float(F32(10.0 ** rng.uniform(-6.0, 0.0)))
        lim = min(int(8.0 / s), 2 ** 31 - 1)
        x = [int(v) for v in rng.integers(-lim, lim + 1, size=9)]
        out, so, _ = int_gelu(x, s)
        doc["gelu"].append({"scale_bits": f32_bits(s), "x": x, "y": out, "out_scale_bits": f32_bits(so)})

    # IntSoftmax: attention-score scales (16-bit rows, an 8-bit grid, a fine accumulator grid),
    # row lengths that leave vector tails, outputs of 8 and 16 bits.
    for rows, cols, absmax, bits, out_bit in [(3, 7, 8.0, 16, 8), (4, 33, 12.0, 16, 8), (2, 128, 5.0, 8, 8),
                                               (2, 64, 10.0, 20, 16), (1, 1, 3.0, 16, 8), (3, 17, 0.5, 16, 8)]:
        s = float(F32(absmax / (2 ** (bits - 1) - 1)))
        lim = 2 ** (bits - 1) - 1
        x = [[int(v) for v in rng.integers(-lim, lim + 1, size=cols)] for _ in range(rows)]
        if cols > 2:
            x[0][1] = x[0][0]  # a tie for the row max
            x[-1][2] = -lim  # far below the max: q reaches its clip at 30
        y, e16 = zip(*[int_softmax_row(r, s, out_bit) for r in x])
        doc["softmax"].append({"scale_bits": f32_bits(s), "output_bit": out_bit, "x": x, "e16": list(e16),
                               "y": list(y)})
        if args.float32_report:
            f = [v for r in x for v in int_softmax_row_float32(r, s, out_bit)]
            report.append(f"softmax {rows}x{cols} bits={bits}: {diff([v for r in y for v in r], f)} under float32")

    # IntSoftmax over scales from 1e-6 to 0.5 (the same reason).
    for _ in range(12):
        s = float(F32(10.0 ** rng.uniform(-6.0, math.log10(0.5))))
        lim = min(int(20.0 / s), 2 ** 31 - 1)
        x = [[int(v) for v in rng.integers(-lim, lim + 1, size=9)] for _ in range(2)]
        y, e16 = zip(*[int_softmax_row(r, s, 8) for r in x])
        doc["softmax"].append({"scale_bits": f32_bits(s), "output_bit": 8, "x": x, "e16": list(e16), "y": list(y)})

    # IntLayerNorm: 16-bit rows (QuantAct(16) in front), BERT's 768 columns, a case whose
    # variance passes 2^32 (the shift rises), a given nonzero shift, a constant row.
    for rows, cols, lim, shift in [(3, 8, 300, 0), (2, 33, 32766, 0), (2, 768, 4000, 0), (2, 96, 32766, 1),
                                   (1, 5, 0, 0)]:
        x = [[int(v) for v in rng.integers(-lim, lim + 1, size=cols)] for _ in range(rows)]
        gamma = [float(F32(v)) for v in rng.uniform(0.5, 1.5, size=cols)]
        beta = [float(F32(v)) for v in rng.uniform(-0.3, 0.3, size=cols)]
        out, osc, used = int_layer_norm(x, gamma, beta, shift)
        doc["layernorm"].append({"shift_in": shift, "shift_out": used, "x": x,
                                 "gamma_bits": [f32_bits(g) for g in gamma], "beta_bits": [f32_bits(b) for b in beta],
                                 "y": out, "out_scale_bits": [f32_bits(v) for v in osc]})
        if args.float32_report:
            f = [v for r in int_layer_norm_float32(x, gamma, beta, used) for v in r]
            report.append(f"layernorm {rows}x{cols} shift {shift}->{used}: "
                          f"{diff([v for r in out for v in r], f)} under float32")

    with open(args.out, "w") as fh:
        json.dump(doc, fh, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {os.path.normpath(args.out)} ({os.path.getsize(args.out)} bytes)")
    for line in report:
        print(line)


if __name__ == "__main__":
    main()
