"""``unirag.runtime.onednn_linears``: a model's float32 linear layers run on oneDNN for CPU inference.

torch's CPU wheels send float32 linear layers to MKL, which takes its AVX2 path on AMD processors;
oneDNN uses the AVX-512 units (docs/benchmarks.md). The swap must keep the outputs (to float rounding),
the parameters and the state dict, and must not break training.
"""

import pytest

torch = pytest.importorskip("torch")

from unirag.runtime import onednn_linears  # noqa: E402


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.GELU(), torch.nn.Linear(96, 32, bias=False),
                               torch.nn.LayerNorm(32))


def test_linear_layers_give_the_same_outputs_and_keep_their_state():
    plain, fast = _model().eval(), onednn_linears(_model().eval())
    assert [type(m).__name__ for m in fast if isinstance(m, torch.nn.Linear)] == ["OneDNNLinear"] * 2
    assert all(isinstance(m, torch.nn.Linear) for m in (fast[0], fast[2]))  # still linear layers to isinstance
    assert plain.state_dict().keys() == fast.state_dict().keys()
    for k, v in plain.state_dict().items():
        assert torch.equal(v, fast.state_dict()[k]), k
    x = torch.randn(3, 17, 48)[:, ::2]  # 3-D and not contiguous, as a transformer's hidden states can be
    with torch.inference_mode():
        want, got = plain(x), fast(x)
    assert got.shape == want.shape == (3, 9, 32)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_gradients_still_flow_where_they_are_recorded():
    fast = onednn_linears(_model())
    x = torch.randn(4, 48, requires_grad=True)
    (fast(x) ** 2).sum().backward()  # (a plain sum of a layer norm has no gradient)
    assert fast[0].weight.grad is not None and x.grad is not None and x.grad.abs().sum() > 0


def test_other_dtypes_are_left_alone():
    model = _model().to(torch.float64)
    onednn_linears(model)
    assert type(model[0]) is torch.nn.Linear
