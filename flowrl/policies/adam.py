"""Adam on torch's fused kernel, without ``torch.optim``'s import of ``torch._dynamo``.

Every ``torch.optim`` optimizer imports ``torch._dynamo`` on its first ``__init__``
or ``step`` (torch wraps them to opt out of compilation); that import is a large
share of a fresh process's time to its first ``train()`` result (see
``benchmarks/startup.py --profile local``). :class:`FusedAdam` applies the same
update through the same kernel as ``torch.optim.Adam(fused=True)``,
``torch._fused_adam_`` (Kingma & Ba's Adam with bias correction, no weight decay,
no AMSGrad), so parameters after any number of steps are identical to torch's.
Its ``state_dict`` has torch's layout, so optimizer state in checkpoints moves
between the two either way.

:func:`make_adam` returns a :class:`FusedAdam` where the kernel exists and a
``torch.optim.Adam`` otherwise (an older torch).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch


class FusedAdam:
    """Adam over ``params`` with learning rate ``lr``, betas ``(0.9, 0.999)`` and
    ``eps=1e-8``; ``zero_grad``/``step``/``state_dict``/``load_state_dict``/
    ``register_step_post_hook`` as in ``torch.optim``. Parameters without a gradient are skipped by a step.

    >>> w = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    >>> opt = FusedAdam([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step(); opt.zero_grad()
    >>> [round(v, 4) for v in w.tolist()], opt.state_dict()["state"][0]["step"].item()
    ([0.9, -0.9], 1.0)
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float, *,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.params = list(params)
        self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
        # per parameter index: step (float32 scalar, on the parameter's device), moments
        self.state: dict[int, dict[str, torch.Tensor]] = {}
        self._post_hooks: dict[int, Callable[..., Any]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop (or zero) every parameter's gradient."""
        for p in self.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        groups: dict[tuple, tuple[list, ...]] = {}
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            s = self.state.get(i)
            if s is None:
                s = self.state[i] = {
                    "step": torch.zeros((), dtype=torch.float32, device=p.device),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
            lists = groups.setdefault((p.device, p.dtype), ([], [], [], [], []))
            for lst, t in zip(lists, (p, p.grad, s["exp_avg"], s["exp_avg_sq"], s["step"])):
                lst.append(t)
        for params, grads, exp_avgs, exp_avg_sqs, steps in groups.values():
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps,
                               amsgrad=False, lr=self.lr, beta1=self.betas[0],
                               beta2=self.betas[1], weight_decay=0.0, eps=self.eps,
                               maximize=False, grad_scale=None, found_inf=None)
        for hook in list(self._post_hooks.values()):
            hook(self, (), {})

    def register_step_post_hook(self, hook: Callable[..., Any]) -> "_HookHandle":
        """Call ``hook(optimizer, args, kwargs)`` after every :meth:`step`, as
        ``torch.optim.Optimizer.register_step_post_hook`` does; ``.remove()`` on the
        returned handle unregisters it."""
        key = max(self._post_hooks, default=-1) + 1
        self._post_hooks[key] = hook
        return _HookHandle(self._post_hooks, key)

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {"step", "exp_avg", "exp_avg_sq"}}, "param_groups": [...]}``,
        the layout of ``torch.optim.Adam.state_dict()`` (tensors are references)."""
        group = {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": 0.0,
                 "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
                 "differentiable": False, "fused": True, "decoupled_weight_decay": False,
                 "params": list(range(len(self.params)))}
        return {"state": {i: dict(s) for i, s in self.state.items()}, "param_groups": [group]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a :meth:`state_dict` (this class's or ``torch.optim.Adam``'s with one
        param group over the same parameters); tensors are copied onto each
        parameter's device."""
        from flowrl.errors import ConfigError
        groups = state_dict.get("param_groups", [])
        n = sum(len(g["params"]) for g in groups)
        if len(groups) != 1 or n != len(self.params):
            raise ConfigError(f"FusedAdam.load_state_dict: the state is for {len(groups)} "
                              f"param group(s) and {n} parameters, this optimizer has one "
                              f"group of {len(self.params)}; load state saved by the same "
                              "model")
        group = groups[0]
        self.lr = float(group.get("lr", self.lr))
        self.betas = tuple(float(b) for b in group.get("betas", self.betas))
        self.eps = float(group.get("eps", self.eps))
        state: dict[int, dict[str, torch.Tensor]] = {}
        for pos, key in enumerate(group["params"]):
            saved = state_dict["state"].get(key, state_dict["state"].get(str(key)))
            if saved is None:
                continue
            p = self.params[pos]
            state[pos] = {
                "step": torch.as_tensor(saved["step"], dtype=torch.float32).to(p.device).clone(),
                "exp_avg": torch.as_tensor(saved["exp_avg"]).to(p.device, p.dtype).clone(),
                "exp_avg_sq": torch.as_tensor(saved["exp_avg_sq"]).to(p.device, p.dtype).clone()}
        self.state = state


class _HookHandle:
    def __init__(self, hooks: dict, key: int):
        self._hooks, self._key = hooks, key

    def remove(self) -> None:
        self._hooks.pop(self._key, None)


def make_adam(params: Iterable[torch.Tensor], lr: float) -> "FusedAdam | torch.optim.Adam":
    """A :class:`FusedAdam` when this torch has the fused kernel, else
    ``torch.optim.Adam`` (which imports ``torch._dynamo``)."""
    if hasattr(torch, "_fused_adam_"):
        return FusedAdam(params, lr)
    return torch.optim.Adam(params, lr=lr)
