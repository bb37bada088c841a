"""Explicit SIMD building blocks for numba kernels (LLVM vector IR through ``numba.extending.intrinsic``).

LLVM does not vectorise a numba loop that accumulates rows of a 2-D array
into a small output array (it cannot prove the arrays do not alias, and the
row width is a runtime value), so the hot loop of the ``hybrid`` sample
sweep ran as scalar code: about 30 instructions per edge. These intrinsics
emit the vector code directly.

``LANES`` (8) float64 values make one vector: a 512-bit register with
AVX-512, two 256-bit ones with AVX2; LLVM legalises the width for the host.
Arrays handed to them must be C-contiguous with a row width that is a
multiple of ``LANES`` (pad with zeros; :func:`padded_width`).

Floating point: every lane computes ``acc = acc + c * d`` as a separate
multiply and add, in edge order, exactly as the scalar loop
``for b: gain[b] += c[p, b] * d[x, b]`` does (no fused multiply-add, no
reassociation), so results are bit-identical to the scalar reference and do
not depend on the machine's vector width.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: float64 values per vector
LANES = 8


def padded_width(n: int) -> int:
    """The smallest multiple of :data:`LANES` that is >= ``n`` (at least LANES)."""
    return max(LANES, -(-int(n) // LANES) * LANES)


def _data_ptr(context, builder, aryty, value):
    return context.make_array(aryty)(context, builder, value).data


@intrinsic
def gather_rows_dot(typingctx, indices, k0, k1, prim, d, c, col, out, count, df, a):  # pragma: no cover - compiled
    """The hot loop of the ``hybrid`` sample sweep, over the edges k in [k0, k1) of one sample:

    * ``out[col:col+LANES] = sum_k c[prim[x], col:col+LANES] * d[x, col:col+LANES]`` with
      ``x = indices[k]``, summed in k order (one multiply and one add per lane per edge);
    * returns ``sum_k c[prim[x], a] * df[count[x, a] - 1]`` (scalar, k order). With
      ``a=None`` that sum is not compiled in (returns 0.0): the extra column blocks of
      N > 8 workers need only the vector sum, and a runtime test in the loop cost ~25 %.

    Both sums read ``indices[k]`` and ``prim[x]`` once. ``indices``, ``prim``: 1-D int32;
    ``d``, ``c``: 2-D C-contiguous float64 of the same row width (a multiple of LANES);
    ``out``, ``df``: 1-D float64; ``count``: 2-D C-contiguous int32. No bounds checks: the
    caller guarantees ``0 <= x < d.shape[0]``, ``0 <= prim[x] < c.shape[0]``,
    ``col + LANES <= width``, ``1 <= count[x, a] <= df.size``.
    """
    ok = (isinstance(indices, types.Array) and indices.ndim == 1 and indices.dtype == types.int32
          and isinstance(prim, types.Array) and prim.ndim == 1 and prim.dtype == types.int32
          and all(isinstance(v, types.Array) and v.ndim == 2 and v.dtype == types.float64 and v.layout == "C"
                  for v in (d, c))
          and isinstance(count, types.Array) and count.ndim == 2 and count.dtype == types.int32
          and count.layout == "C"
          and all(isinstance(v, types.Array) and v.ndim == 1 and v.dtype == types.float64 for v in (out, df))
          and all(isinstance(v, types.Integer) for v in (k0, k1, col))
          and isinstance(a, (types.Integer, types.NoneType)))
    if not ok:
        return None
    sig = types.float64(indices, k0, k1, prim, d, c, col, out, count, df, a)

    def codegen(context, builder, signature, args):
        t_ind, t_k0, t_k1, t_prim, t_d, t_c, t_col, t_out, t_cnt, t_df, t_a = signature.args
        v_ind, v_k0, v_k1, v_prim, v_d, v_c, v_col, v_out, v_cnt, v_df, v_a = args
        i64 = ir.IntType(64)
        f64 = ir.DoubleType()
        vec = ir.VectorType(f64, LANES)
        ind_ptr = _data_ptr(context, builder, t_ind, v_ind)
        prim_ptr = _data_ptr(context, builder, t_prim, v_prim)
        d_ary = context.make_array(t_d)(context, builder, v_d)
        c_ptr = _data_ptr(context, builder, t_c, v_c)
        out_ptr = _data_ptr(context, builder, t_out, v_out)
        cnt_ary = context.make_array(t_cnt)(context, builder, v_cnt)
        df_ptr = _data_ptr(context, builder, t_df, v_df)
        width = builder.extract_value(d_ary.shape, 1)  # row width in values (same for c)
        ncnt = builder.extract_value(cnt_ary.shape, 1)
        col = context.cast(builder, v_col, t_col, types.int64)
        with_stay = isinstance(t_a, types.Integer)  # decided at compile time
        a = context.cast(builder, v_a, t_a, types.int64) if with_stay else None
        k0 = context.cast(builder, v_k0, t_k0, types.int64)
        k1 = context.cast(builder, v_k1, t_k1, types.int64)

        acc_slot = cgutils.alloca_once(builder, vec)
        stay_slot = cgutils.alloca_once(builder, f64)
        builder.store(ir.Constant(vec, [0.0] * LANES), acc_slot)
        builder.store(ir.Constant(f64, 0.0), stay_slot)
        one = ir.Constant(i64, 1)
        with cgutils.for_range_slice(builder, k0, k1, one, inc=True) as (k, _):
            x = builder.sext(builder.load(builder.gep(ind_ptr, [k])), i64)
            p = builder.sext(builder.load(builder.gep(prim_ptr, [x])), i64)
            c_row = builder.add(builder.mul(p, width), col)
            d_row = builder.gep(d_ary.data, [builder.add(builder.mul(x, width), col)])
            dv = builder.load(builder.bitcast(d_row, vec.as_pointer()), align=8)
            cv = builder.load(builder.bitcast(builder.gep(c_ptr, [c_row]), vec.as_pointer()), align=8)
            builder.store(builder.fadd(builder.load(acc_slot), builder.fmul(cv, dv)), acc_slot)
            if with_stay:
                cnt = builder.load(builder.gep(cnt_ary.data, [builder.add(builder.mul(x, ncnt), a)]))
                dfv = builder.load(builder.gep(df_ptr, [builder.sub(builder.sext(cnt, i64), one)]))
                cav = builder.load(builder.gep(c_ptr, [builder.add(builder.mul(p, width), a)]))
                builder.store(builder.fadd(builder.load(stay_slot), builder.fmul(cav, dfv)), stay_slot)
        dst = builder.bitcast(builder.gep(out_ptr, [col]), vec.as_pointer())
        builder.store(builder.load(acc_slot), dst, align=8)
        return builder.load(stay_slot)

    return sig, codegen


@intrinsic
def weighted_row_sum(typingctx, m, coef, n, col, out):  # pragma: no cover - compiled
    """``out[col:col+LANES] = sum_{w < n} coef[w] * m[w, col:col+LANES]``, summed in w order.

    ``m``: 2-D C-contiguous float64 (row width a multiple of LANES, at least n rows);
    ``coef``, ``out``: 1-D float64. One multiply and one add per lane per row, so the
    result equals the scalar loop ``for w: out[q] += coef[w] * m[w, q]`` bit for bit.
    """
    ok = (isinstance(m, types.Array) and m.ndim == 2 and m.dtype == types.float64 and m.layout == "C"
          and all(isinstance(v, types.Array) and v.ndim == 1 and v.dtype == types.float64 for v in (coef, out))
          and isinstance(n, types.Integer) and isinstance(col, types.Integer))
    if not ok:
        return None
    sig = types.void(m, coef, n, col, out)

    def codegen(context, builder, signature, args):
        t_m, t_coef, t_n, t_col, t_out = signature.args
        v_m, v_coef, v_n, v_col, v_out = args
        i64 = ir.IntType(64)
        f64 = ir.DoubleType()
        vec = ir.VectorType(f64, LANES)
        m_ary = context.make_array(t_m)(context, builder, v_m)
        coef_ptr = _data_ptr(context, builder, t_coef, v_coef)
        out_ptr = _data_ptr(context, builder, t_out, v_out)
        width = builder.extract_value(m_ary.shape, 1)
        col = context.cast(builder, v_col, t_col, types.int64)
        n = context.cast(builder, v_n, t_n, types.int64)
        acc_slot = cgutils.alloca_once(builder, vec)
        builder.store(ir.Constant(vec, [0.0] * LANES), acc_slot)
        zero = ir.Constant(i64, 0)
        with cgutils.for_range_slice(builder, zero, n, ir.Constant(i64, 1), inc=True) as (w, _):
            cw = builder.load(builder.gep(coef_ptr, [w]))
            splat = builder.insert_element(ir.Constant(vec, ir.Undefined), cw, ir.Constant(ir.IntType(32), 0))
            splat = builder.shuffle_vector(splat, ir.Constant(vec, ir.Undefined),
                                           ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES))
            row = builder.gep(m_ary.data, [builder.add(builder.mul(w, width), col)])
            mv = builder.load(builder.bitcast(row, vec.as_pointer()), align=8)
            builder.store(builder.fadd(builder.load(acc_slot), builder.fmul(splat, mv)), acc_slot)
        dst = builder.bitcast(builder.gep(out_ptr, [col]), vec.as_pointer())
        builder.store(builder.load(acc_slot), dst, align=8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch(typingctx, arr, idx):  # pragma: no cover - compiled
    """Hint the CPU to load the cache line of ``arr[idx]`` (1-D) or of row ``idx`` (2-D C-contiguous)."""
    if not (isinstance(arr, types.Array) and arr.layout == "C" and isinstance(idx, types.Integer)):
        return None
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        t_arr, t_idx = signature.args
        ary = context.make_array(t_arr)(context, builder, args[0])
        i = context.cast(builder, args[1], t_idx, types.int64)
        if t_arr.ndim == 2:
            i = builder.mul(i, builder.extract_value(ary.shape, 1))
        ptr = builder.bitcast(builder.gep(ary.data, [i]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def popcount(typingctx, x):  # pragma: no cover - compiled
    """The set bits of a 64-bit integer (LLVM's ``ctpop``: one instruction on CPUs that have it)."""
    if not (isinstance(x, types.Integer) and x.bitwidth == 64):
        return None
    sig = types.int64(x)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64]), "llvm.ctpop.i64")
        return builder.call(fn, [args[0]])

    return sig, codegen
