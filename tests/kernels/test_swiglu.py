"""GgufMatMul with ``activation="swiglu"`` on every x86 ISA: silu(gate) * up of the op's own
products, bit for bit the scalar formula (each ISA's vector loop runs the same IEEE
operations), within 3e-7 of float64, with its rows independent of the rows beside them."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import X86_ISAS, require_library, run_under_isa
from swiglu_cases import HALF, SILU_ERROR, cases, pairs, swiglu_float32


@pytest.fixture(scope="module", params=X86_ISAS)
def computed(request):
    require_library()
    outputs = run_under_isa(request.param, cases())
    if outputs["status"].isa != request.param:
        pytest.skip(f"{request.param} does not run here: {outputs['status'].reason}")
    return outputs["results"]


def test_the_activation_is_the_scalar_formula_bit_for_bit(computed):
    for plain, gated in pairs(computed):
        for m, products in plain.items():
            assert gated[m].shape == (m, HALF)
            assert np.array_equal(gated[m], swiglu_float32(products))


def test_the_activation_is_silu_within_its_bound(computed):
    for plain, gated in pairs(computed):
        products = plain[max(plain)].astype(np.float64)
        gate, up = products[:, :HALF], products[:, HALF:]
        with np.errstate(over="ignore"):
            exact = gate / (1.0 + np.exp(-gate)) * up
        got = gated[max(gated)].astype(np.float64)
        beyond = gate < -87.0  # the clamp: e^-g taken as e^87, so the product is below 1e-36 of g*u
        assert np.all(np.abs(got[beyond]) <= np.abs(gate * up)[beyond] * 1e-36)
        assert np.all(np.abs(got - exact)[~beyond] <= SILU_ERROR * np.abs(exact)[~beyond])


def test_a_row_alone_equals_that_row_in_any_batch(computed):
    for _, gated in pairs(computed):
        full = gated[max(gated)]
        for m, rows in gated.items():
            assert np.array_equal(rows, full[:m])
