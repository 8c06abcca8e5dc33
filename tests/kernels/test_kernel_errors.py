"""Bad attributes, shapes and forced ISAs give an error that names the problem."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from gguf_blocks import random_blocks
from gguf_matmul_graph import gguf_matmul_model, gguf_matmul_session, run_gguf_matmul
from kernel_cases import require_library

from clika_runtime.kernels.op import stored_row_bytes


@pytest.fixture(autouse=True)
def built():
    require_library()


def test_unknown_ggml_type_is_refused_naming_it():
    with pytest.raises(Exception, match="ggml_type 99 is not supported"):
        gguf_matmul_session(gguf_matmul_model(99, 256, 8))


def test_k_off_the_block_is_refused_naming_the_block():
    with pytest.raises(Exception, match=r"K=300 must be a positive multiple of the block \(256 weights\)"):
        gguf_matmul_session(gguf_matmul_model("Q4_K", 300, 8))


def test_unknown_precision_is_refused_naming_it():
    with pytest.raises(Exception, match="precision 'fp16' is not one of fp32, int8"):
        gguf_matmul_session(gguf_matmul_model("Q4_0", 64, 8, precision="fp16"))


def test_unknown_activation_is_refused_naming_it():
    with pytest.raises(Exception, match="activation 'gelu' is not one of none, swiglu"):
        gguf_matmul_session(gguf_matmul_model("Q4_0", 64, 8, activation="gelu"))


def test_swiglu_over_an_odd_number_of_rows_is_refused():
    with pytest.raises(
        Exception, match=r"N=7 must be even for activation swiglu \(gate rows, then up rows\)"
    ):
        gguf_matmul_session(gguf_matmul_model("Q4_0", 64, 7, activation="swiglu"))


def test_wrong_row_bytes_are_refused_with_the_expected_shape():
    session = gguf_matmul_session(gguf_matmul_model("Q4_1", 64, 4))
    a = np.ones((1, 64), np.float32)
    blocks = random_blocks("Q4_1", 4, 64)
    assert blocks.shape[1] == stored_row_bytes("Q4_1", 64)
    with pytest.raises(Exception, match=r"B has shape \[4, 39\]; expected \[N, row_bytes\] = \[4, 40\]"):
        run_gguf_matmul(session, a, blocks[:, :39].copy())


def test_activations_of_the_wrong_width_are_refused():
    session = gguf_matmul_session(gguf_matmul_model("Q8_0", 64, 4))
    with pytest.raises(Exception, match=r"A has shape \[2, 32\]; its last dimension must be K=64"):
        run_gguf_matmul(session, np.ones((2, 32), np.float32), random_blocks("Q8_0", 4, 64))


def status_under(isa: str) -> str:
    code = "from clika_runtime.kernels.library import kernel_status; s = kernel_status(); print(s.available, s.reason)"
    env = {**os.environ, "CLIKA_KERNEL_ISA": isa}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout


def test_a_forced_isa_this_cpu_lacks_is_reported_unavailable():
    assert status_under("neon").strip() == "False CLIKA_KERNEL_ISA=neon is not supported by this CPU or build"


def test_an_unknown_forced_isa_is_reported_with_the_choices():
    out = status_under("sse9")
    assert out.startswith("False CLIKA_KERNEL_ISA=sse9 is not one of scalar, avx2")
