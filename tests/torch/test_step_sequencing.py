"""`TrainStep`'s sequencing without a GPU: a backend that records its calls drives the per-shape
cache (warm-up, capture, replay), the one shared pool, the checks a captured step makes before a
replay (frozen values, gradients kept), its errors, and the results (equal to the plain loop)."""

from __future__ import annotations

import contextlib
import copy

import pytest

torch = pytest.importorskip("torch")

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402


class RecordingBackend:
    """A `StepBackend` that records its calls in ``events``; "capture" records nothing and a
    "replay" runs the step (as a CUDA graph replays what it captured)."""

    def __init__(self, events, *, warmup_steps=2, frozen=True, device=None, sync_error=False):
        self.events = events
        self.warmup_steps = warmup_steps
        self.frozen = frozen
        self.device = None if device is None else torch.device(device)
        self.sync_error = sync_error
        self.pools = []
        self.debug_mode = False

    def new_pool(self):
        pool = object()
        self.pools.append(pool)
        self.events.append("pool")
        return pool

    @contextlib.contextmanager
    def sync_check(self):
        self.events.append("check")
        self.debug_mode = self.sync_error
        try:
            yield
        finally:
            self.debug_mode = False

    def warmup(self, fn):
        self.events.append("warmup")
        return fn()

    def capture(self, fn, pool):
        self.events.append("capture")
        return (fn, pool)

    def replay(self, graph):
        self.events.append("replay")
        return graph[0]().clone()


class Tiny(torch.nn.Module):
    """Per-row linear regression on a dict batch ``{"x": [n, 3], "y": [n]}``; records the row
    count of every forward in ``events`` (``"run:n"``)."""

    def __init__(self, events=None, hook=None):
        super().__init__()
        self.lin = torch.nn.Linear(3, 1)
        self.events = events
        self.hook = hook

    def forward(self, batch):
        if self.events is not None:
            self.events.append(f"run:{batch['x'].shape[0]}")
        if self.hook is not None:
            self.hook(batch)
        return self.lin(batch["x"])[:, 0]


def mse(out, batch):
    return ((out - batch["y"]) ** 2).mean()


def batch_of(n, seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(n, 3, generator=g), "y": torch.randn(n, generator=g)}


def plain_losses(model, opt, batches):
    out = []
    for b in batches:
        opt.zero_grad()
        loss = mse(model(b), b)
        loss.backward()
        opt.step()
        out.append(loss.detach())
    return out


def make(events, **kw):
    torch.manual_seed(0)
    model = Tiny(events)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    backend_kw = {
        k: kw.pop(k) for k in ("warmup_steps", "frozen", "device", "sync_error") if k in kw
    }
    backend = RecordingBackend(events, **backend_kw)
    return model, opt, gt.TrainStep(model, mse, opt, backend=backend, **kw), backend


SEQUENCE = [4, 4, 4, 4, 6, 4, 6, 6, 6]  # rows per batch: shapes A A A A B A B B B


def test_warmup_capture_replay_sequence_per_shape():
    events = []
    _, _, step, backend = make(events, warmup_steps=2, check=False)
    for i, n in enumerate(SEQUENCE):
        step(batch_of(n, i))
    assert events == [
        "warmup", "run:4",
        "warmup", "run:4",
        "pool", "capture", "replay", "run:4",
        "replay", "run:4",
        "warmup", "run:6",
        "replay", "run:4",
        "warmup", "run:6",
        "capture", "replay", "run:6",
        "replay", "run:6",
    ]  # fmt: skip
    assert len(step.shapes) == 2 and len(step.graphs) == 2
    assert [k.fields[0][1] for k in step.shapes] == [(4, 3), (6, 3)]
    # one pool, made at the first capture, shared by every graph
    assert len(backend.pools) == 1 and step.pool is backend.pools[0]
    assert all(g[1] is step.pool for g in step.graphs.values())


def test_checked_warmup_is_the_first_of_each_shape():
    events = []
    _, _, step, _ = make(events, warmup_steps=1, check=True)
    assert step.warmup_steps == 2
    for i, n in enumerate([4, 4, 4, 5, 5, 5]):
        step(batch_of(n, i))
    assert events == [
        "warmup", "check", "run:4",
        "warmup", "run:4",
        "pool", "capture", "replay", "run:4",
        "warmup", "check", "run:5",
        "warmup", "run:5",
        "capture", "replay", "run:5",
    ]  # fmt: skip


@pytest.mark.parametrize("warmup", [0, 3])
def test_k_shapes_give_k_graphs_and_the_plain_loop_losses(warmup):
    sizes = [3, 5, 7, 3, 5, 7, 9, 3, 9, 9, 5, 7, 3, 3, 5, 9, 7, 7, 3, 5]
    batches = [batch_of(n, i) for i, n in enumerate(sizes)]
    model, _, step, backend = make([], warmup_steps=warmup, check=False)
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    want = plain_losses(ref, ref_opt, batches)
    got = [step(b) for b in batches]
    torch.testing.assert_close(torch.stack(got), torch.stack(want), rtol=0, atol=1e-6)
    assert len(step.shapes) == len(step.graphs) == len(set(sizes)) == 4
    assert len(backend.pools) == 1
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)


def test_eager_backend_is_the_default_on_cpu_and_matches_the_plain_loop():
    torch.manual_seed(0)
    model = Tiny()
    ref = copy.deepcopy(model)
    step = gt.TrainStep(model, mse, torch.optim.Adam(model.parameters(), lr=0.05))
    assert isinstance(step.backend, gt.EagerBackend)
    assert step.check is False and step.warmup_steps == 0
    batches = [batch_of(n, i) for i, n in enumerate([4, 6, 4, 6, 8])]
    want = plain_losses(ref, torch.optim.Adam(ref.parameters(), lr=0.05), batches)
    got = [step(b) for b in batches]
    assert torch.equal(torch.stack(got), torch.stack(want))
    assert step.pool is None and len(step.graphs) == 3
    assert "3 shapes" in repr(step)


def test_batch_values_reach_the_step_not_the_first_batch_of_the_shape():
    seen = []
    torch.manual_seed(0)
    model = Tiny(hook=lambda b: seen.append(b["x"].clone()))
    step = gt.TrainStep(model, mse, torch.optim.SGD(model.parameters(), lr=0.1))
    b1, b2 = batch_of(4, 1), batch_of(4, 2)
    step(b1)
    step(b2)
    assert torch.equal(seen[0], b1["x"]) and torch.equal(seen[1], b2["x"])
    # the model's input is the step's own buffer, never the caller's tensor
    assert len(step.shapes) == 1


# ------------------------------------------------------------------ frozen values
def test_changed_lr_after_capture_is_refused_and_reset_captures_again():
    events = []
    _, opt, step, _ = make(events, warmup_steps=1, check=False)
    for i in range(3):
        step(batch_of(4, i))
    opt.param_groups[0]["lr"] = 0.05
    with pytest.raises(
        gb.CaptureError, match=r"param_groups\[0\]\['lr'\] is 0.05, captured with 0.1"
    ):
        step(batch_of(4, 9))
    step.reset()
    events.clear()
    step(batch_of(4, 10))
    step(batch_of(4, 11))
    assert events == ["warmup", "run:4", "pool", "capture", "replay", "run:4"]


def test_tensor_lr_changed_in_place_is_accepted():
    events = []
    torch.manual_seed(0)
    model = Tiny(events)
    lr = torch.tensor(0.1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    step = gt.TrainStep(model, mse, opt, backend=RecordingBackend(events, warmup_steps=0))
    step(batch_of(4, 0))
    lr.fill_(0.01)
    step(batch_of(4, 1))  # the graph reads the tensor: no error
    opt.param_groups[0]["lr"] = torch.tensor(0.01)  # a new tensor is a new value
    with pytest.raises(gb.CaptureError, match="lr"):
        step(batch_of(4, 2))


def test_train_eval_switch_and_loaded_optimizer_state_are_refused():
    model, opt, step, _ = make([], warmup_steps=0, check=False)
    step(batch_of(4, 0))
    model.eval()
    with pytest.raises(gb.CaptureError, match=r"model.training is False.*step.reset\(\)"):
        step(batch_of(4, 1))
    model.train()
    step(batch_of(4, 1))
    opt.load_state_dict(opt.state_dict())
    with pytest.raises(gb.CaptureError, match="load_state_dict"):
        step(batch_of(4, 2))


def test_gradients_dropped_by_user_code_are_put_back():
    batches = [batch_of(4, i) for i in range(6)]
    model, opt, step, _ = make([], warmup_steps=1, check=False)
    ref = copy.deepcopy(model)
    want = plain_losses(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9), batches)
    got = [step(batches[0]), step(batches[1])]
    held = [p.grad for p in model.parameters()]
    assert all(g is not None for g in held)
    for b in batches[2:]:
        opt.zero_grad()  # set_to_none=True: a captured graph would still write the old tensors
        assert all(p.grad is None for p in model.parameters())
        got.append(step(b))
        assert all(p.grad is g for p, g in zip(model.parameters(), held, strict=True))
    torch.testing.assert_close(torch.stack(got), torch.stack(want), rtol=0, atol=1e-6)


# ------------------------------------------------------------- construction checks
@pytest.mark.parametrize(
    "make_opt, match",
    [
        (lambda p: torch.optim.Adam(p), "Adam has capturable=False"),
        (lambda p: torch.optim.AdamW(p, capturable=False), "AdamW has capturable=False"),
        (lambda p: torch.optim.Adagrad(p), "Adagrad has no capturable option"),
    ],
)
def test_non_capturable_optimizers_are_refused_when_capturing(make_opt, match):
    model = Tiny()
    with pytest.raises(gb.CaptureError, match=match):
        gt.TrainStep(model, mse, make_opt(model.parameters()), backend=RecordingBackend([]))
    # the eager path takes them
    gt.TrainStep(model, mse, make_opt(model.parameters()))


def test_capturable_optimizer_passes_the_construction_check():
    model = Tiny()
    opt = torch.optim.Adam(model.parameters(), capturable=True)
    step = gt.TrainStep(model, mse, opt, backend=RecordingBackend([]))
    assert step.check is True  # on by default where the backend captures


def test_parameters_off_the_capture_device_are_refused():
    model = Tiny()
    with pytest.raises(gb.CaptureError, match=r"parameter 'lin.weight' is on cpu.*cuda"):
        gt.TrainStep(
            model,
            mse,
            torch.optim.SGD(model.parameters(), lr=0.1),
            backend=RecordingBackend([], device="cuda"),
        )


def test_tensor_options_off_the_capture_device_are_refused():
    class NoParams(torch.nn.Module):  # nothing of its own on the wrong device
        def forward(self, batch):
            return batch["x"][:, 0] * 0

    weight = torch.zeros(3, requires_grad=True)
    opt = torch.optim.SGD([weight], lr=torch.tensor(0.1))
    with pytest.raises(gb.CaptureError, match=r"optimizer option \"param_groups\[0\]\['lr'\]\""):
        gt.TrainStep(NoParams(), mse, opt, backend=RecordingBackend([], device="cuda"))


def test_sync_found_by_the_backend_is_a_capture_error_naming_the_line():
    def hook(batch):
        if backend.debug_mode:  # what torch.cuda.set_sync_debug_mode("error") does on CUDA
            raise RuntimeError("called a synchronizing CUDA operation")

    events = []
    torch.manual_seed(0)
    model = Tiny(events, hook=hook)
    backend = RecordingBackend(events, sync_error=True)
    step = gt.TrainStep(model, mse, torch.optim.SGD(model.parameters(), lr=0.1), backend=backend)
    with pytest.raises(gb.CaptureError) as info:
        step(batch_of(4, 0))
    msg = str(info.value)
    assert msg.startswith("TrainStep cannot capture this step: a host sync at ")
    assert "test_step_sequencing.py" in msg and "in hook" in msg and "\n" not in msg


def test_failed_capture_is_a_capture_error_naming_the_shape():
    class Failing(RecordingBackend):
        def capture(self, fn, pool):
            raise RuntimeError("operation not permitted when stream is capturing\nmore")

    model = Tiny()
    step = gt.TrainStep(
        model, mse, torch.optim.SGD(model.parameters(), lr=0.1), backend=Failing([], warmup_steps=1)
    )
    step(batch_of(4, 0))
    step(batch_of(4, 1))
    with pytest.raises(
        gb.CaptureError, match=r"shape \(2 tensors\) failed: RuntimeError: op"
    ) as info:
        step(batch_of(4, 2))
    assert "\n" not in str(info.value)
    assert isinstance(info.value, RuntimeError)


@pytest.mark.parametrize(
    "kw, err, match",
    [
        ({"compile": "yes"}, gb.InputTypeError, "compile must be a bool or a dict"),
        ({"warmup": -1}, gb.InputError, "warmup must be an integer >= 0"),
        ({"warmup": 1.5}, gb.InputError, "warmup must be an integer >= 0"),
        ({"capture": True}, gb.InputError, "capture=True needs the model on a CUDA device"),
        ({"capture": False, "backend": gt.EagerBackend()}, gb.InputError, "not both"),
        ({"forward": 3}, gb.InputTypeError, "forward must be callable"),
    ],
)
def test_bad_arguments(kw, err, match):
    model = Tiny()
    with pytest.raises(err, match=match):
        gt.TrainStep(model, mse, torch.optim.SGD(model.parameters(), lr=0.1), **kw)


def test_bad_model_optimizer_loss_and_batch():
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(gb.InputTypeError, match=r"model must be a torch\.nn\.Module"):
        gt.TrainStep(lambda b: b, mse, opt)
    with pytest.raises(gb.InputTypeError, match=r"optimizer must be a torch\.optim\.Optimizer"):
        gt.TrainStep(model, mse, object())
    with pytest.raises(gb.InputTypeError, match="loss_fn must return a tensor, got float"):
        gt.TrainStep(model, lambda o, b: 1.0, opt)(batch_of(4, 0))
    with pytest.raises(gb.InputError, match=r"one value, got a tensor of shape \[4\]"):
        gt.TrainStep(model, lambda o, b: o, opt)(batch_of(4, 0))
    with pytest.raises(gb.InputError, match="the batch holds no tensor"):
        gt.TrainStep(model, mse, opt)({"n": 3})


def test_compile_mode_with_cuda_graphs_of_its_own_is_refused_when_capturing():
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(gb.InputError, match="'reduce-overhead' makes CUDA graphs of its own"):
        gt.TrainStep(
            model, mse, opt, compile={"mode": "reduce-overhead"}, backend=RecordingBackend([])
        )
    # compiled + capturing: at least one compiled warm-up before the capture, plus the check
    step = gt.TrainStep(
        model,
        mse,
        opt,
        compile={"backend": "eager"},
        warmup=0,
        backend=RecordingBackend([], warmup_steps=0),
    )
    assert step.warmup_steps == 2


def test_capture_error_is_a_graphbatch_runtime_error():
    assert issubclass(gb.CaptureError, gb.GraphbatchError)
    assert issubclass(gb.CaptureError, RuntimeError)
    assert gt.CaptureError is gb.CaptureError
