"""fedlgc from Python: federate your own torch.nn.Module with your own training loop.

    import fedlgc

    def train(module, info):            # info: a fedlgc.RoundInfo
        opt = torch.optim.Adam(module.parameters(), lr=1e-3)
        for x, y in my_loader(info.seed):
            ...                          # any loop: augmentation, AMP, schedulers
        return {"samples": n, "loss": last_loss}

    fedlgc.run_client(module, train, server="coordinator:7000", client_id="client-7",
                      num_samples=len(my_data), tls=fedlgc.Tls("ca.pem", "c7.pem", "c7.key"),
                      state_dir="state")

run_client is the C++ edge client (fedlgc-edge) with its training step replaced by
`train`: the same transport, resumable chunks, persisted state (a client killed at any
point and restarted with the same state_dir loses nothing), codecs, error feedback,
compressed downlink and modes. Before each round the global model (or, in LSGD and SGP,
the client's own) is loaded into `module`; after `train` returns, the module's weights are
what the client sends, as an update through the job's codec. The module must have the
job's architecture: the names and shapes of the TorchScript file the coordinator serves
(torch.jit.script(module) of the same class is the usual way to make that file).

fedlgc.codecs exposes the codec library (encode/decode, byte for byte the C++ frames).
docs/your-model.md is the guide.
"""

import dataclasses
import operator
import os
import threading
import time

import torch  # noqa: F401  (libtorch first: the extension links the same one)

from . import _flat, codecs
from . import _fedlgc
from . import _bn
from ._bn import Statistics, reestimate_statistics

__all__ = ["run_client", "RoundInfo", "RoundResult", "EvalInfo", "Tls", "layout_of", "cuts_of",
           "StatisticsInfo", "proximal_term", "scaffold_step", "reestimate_statistics",
           "Statistics", "codecs", "__version__"]

__version__ = _fedlgc.VERSION

PROTOCOL_VERSION = _fedlgc.PROTOCOL_VERSION
layout_of = _flat.layout_of
cuts_of = _flat.cuts_of


@dataclasses.dataclass(frozen=True)
class Tls:
    """mTLS files: the CA of the coordinator's certificate, this client's certificate
    (its common name is the client id) and key, the name in the coordinator's
    certificate."""
    ca: str
    cert: str
    key: str
    server_name: str = "localhost"


@dataclasses.dataclass(frozen=True)
class RoundInfo:
    """What the coordinator asks of this client in a round. lr, local_epochs,
    local_steps (when > 0 it overrides epochs) and batch_size are the job's settings
    (the coordinator's --lr, --local-epochs, --local-steps, --batch); a train function
    may follow them or not. seed differs per round and client: seed your shuffling and
    augmentation with it for repeatable runs."""
    round: int
    total_rounds: int
    mode: str
    lr: float
    local_epochs: int
    local_steps: int
    batch_size: int
    seed: int
    model_version: int
    data: object = None  # run_client's `data` (the simulator's runner: this client's Shard)
    # FedProx (the coordinator's --algorithm fedprox(mu=M)): the loop adds
    # fedlgc.proximal_term(module, info) to its loss; 0 in other jobs.
    prox_mu: float = 0.0
    # SCAFFOLD (the coordinator's --algorithm scaffold): the loop calls
    # fedlgc.scaffold_step(module, info) after each optimizer.step(); False in other jobs.
    scaffold: bool = False
    # The round's starting weights (FedProx's anchor) and whether proximal_term was used.
    _anchor: tuple = dataclasses.field(default=(), repr=False, compare=False)
    _used: list = dataclasses.field(default_factory=list, repr=False, compare=False)
    # SCAFFOLD: c - c_i per trainable parameter (on its device), and the steps
    # scaffold_step took: {"steps": K, "lr_sum": the sum of their learning rates}.
    _correction: tuple = dataclasses.field(default=(), repr=False, compare=False)
    _steps: dict = dataclasses.field(default_factory=lambda: {"steps": 0, "lr_sum": 0.0},
                                     repr=False, compare=False)


def proximal_term(module, info):
    """FedProx's term of the local objective (Li et al. 2020): (mu / 2) ||w - w_round||^2
    over the module's trainable parameters, w_round their values when the round began and
    mu the job's (info.prox_mu). Add it to each batch's loss:

        loss = loss_fn(module(x), y) + fedlgc.proximal_term(module, info)

    In a job without FedProx it is 0 (a loop may add it always); in a FedProx job a train()
    that never calls it is an error, since its clients would train plain FedAvg unawares."""
    info._used.append(True)
    if info.prox_mu <= 0:
        return torch.zeros(())
    # As _scaffold_correction walks them: trainable and not empty.
    params = [p for p in module.parameters() if p.requires_grad and p.numel() > 0]
    if len(params) != len(info._anchor):
        raise ValueError("proximal_term: the module's trainable parameters changed during "
                         "the round")
    total = sum(((p - a) ** 2).sum() for p, a in zip(params, info._anchor))
    return 0.5 * info.prox_mu * total


def scaffold_step(module, info, optimizer=None, lr=None):
    """SCAFFOLD's correction of one local step (Karimireddy et al. 2020): call it right
    after each optimizer.step(). It moves the module's trainable parameters by
    -lr (c - c_i), outside the optimizer's momentum, c the server's control variate and c_i
    this client's, and counts the step (the client's next c_i is c_i - c + (x - y) / (K lr),
    K the steps counted):

        loss.backward(); optimizer.step(); fedlgc.scaffold_step(module, info, optimizer)

    lr is the step's learning rate: `lr`, else the optimizer's (its first parameter group's,
    so a scheduler's), else info.lr. In a job without SCAFFOLD it does nothing (a loop may
    call it always); in a SCAFFOLD job a train() that never calls it is an error, since its
    client would train plain FedAvg and send a control variate of nothing."""
    if not info.scaffold:
        return
    if lr is None:
        lr = optimizer.param_groups[0]["lr"] if optimizer is not None else info.lr
    # As _scaffold_correction walks them: trainable and not empty.
    params = [p for p in module.parameters() if p.requires_grad and p.numel() > 0]
    if len(params) != len(info._correction):
        raise ValueError("scaffold_step: the module's trainable parameters changed during "
                         "the round")
    with torch.no_grad():
        for p, c in zip(params, info._correction):
            p.add_(c, alpha=-float(lr))
    info._steps["steps"] += 1
    info._steps["lr_sum"] += float(lr)


def _scaffold_correction(module, flat, local=()):
    """The flat correction (float32, the job's vector) as one tensor per trainable
    parameter, in module.parameters() order, on its device and in its dtype. The vector
    holds the parameters that travel first, in named_parameters() order, leaving out
    empty, frozen and personal ones (_flat.flat_tensors); a personal parameter, trained
    but not in it, has no correction (zeros)."""
    out, off = [], 0
    for name, p in module.named_parameters():
        n = p.numel()
        if n == 0 or not p.requires_grad:
            continue
        if name in local:
            out.append(torch.zeros_like(p))
            continue
        c = torch.from_numpy(flat[off:off + n].copy()).view(p.shape)
        out.append(c.to(p.device, p.dtype))
        off += n
    return tuple(out)


@dataclasses.dataclass
class RoundResult:
    """One round this client trained: the sample count and metrics `train` returned,
    and the seconds it took."""
    round: int
    samples: int
    metrics: dict
    seconds: float


def _count(n):
    """A whole number of samples: an int, a NumPy or 0-d torch integer."""
    if isinstance(n, bool):
        raise TypeError("the sample count train() returns is a bool, not a number")
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"the sample count train() returns must be a whole number, not "
                        f"{type(n).__name__}") from None
    if n < 0:
        raise ValueError(f"train() returned {n} samples")
    return n


def _parse_result(result):
    if result is None:
        raise TypeError("train() must return its sample count, or a dict with 'samples' "
                        "(and metrics such as 'loss')")
    if isinstance(result, dict):
        if "samples" not in result:
            raise TypeError("the dict train() returns needs 'samples'")
        metrics = {str(k): float(v) for k, v in result.items() if k != "samples"}
        return _count(result["samples"]), metrics
    return _count(result), {}


@dataclasses.dataclass(frozen=True)
class EvalInfo:
    """What the coordinator asks of an evaluation (--eval clients or both): the round whose
    committed model the module holds, and its version."""
    round: int
    model_version: int
    data: object = None  # run_client's `eval_data` (the simulator's runner: the held-out Shard)


@dataclasses.dataclass(frozen=True)
class StatisticsInfo:
    """What the coordinator asks of a statistics phase (--bn-stats on): the round whose
    committed model the module holds, its version, and at most `batches` batches of
    `batch_size` of this client's training examples, shuffled with `seed`, to pass through
    fedlgc.reestimate_statistics."""
    round: int
    model_version: int
    batches: int
    batch_size: int
    seed: int
    data: object = None  # run_client's `data` (the simulator's runner: this client's Shard)


def _parse_statistics(result, module):
    """A statistics() result as the C++ client reads it: the Statistics that
    fedlgc.reestimate_statistics returned for `module`, or None."""
    if result is None:
        return None
    if not isinstance(result, Statistics):
        raise TypeError("statistics() must return None or what fedlgc.reestimate_statistics "
                        f"returned, not {type(result).__name__}")
    channels = sum(int(m.numel()) for _, m, _, _ in _bn._pairs(module))
    if len(result.mean) != channels or len(result.var) != channels:
        raise ValueError(f"statistics() returned {len(result.mean)} means and "
                         f"{len(result.var)} variances for a module of {channels} channels")
    return (_count(result.examples), _count(result.batches),
            [float(v) for v in result.mean], [float(v) for v in result.var],
            [int(p) for p in result.skipped])


def _parse_eval(result):
    """An evaluate() result as the C++ client reads it: examples and loss, with the
    accuracy or per-class counts (class_examples, class_correct) for class labels."""
    if result is None:
        return None
    if not isinstance(result, dict) or "examples" not in result or "loss" not in result:
        raise TypeError("evaluate() must return None or a dict with 'examples' and 'loss' "
                        "(and 'accuracy', or 'class_examples' and 'class_correct')")
    out = {"examples": _count(result["examples"]), "loss": float(result["loss"])}
    if "accuracy" in result:
        out["accuracy"] = float(result["accuracy"])
    if "class_examples" in result or "class_correct" in result:
        ex = [_count(v) for v in result["class_examples"]]
        ok = [_count(v) for v in result["class_correct"]]
        if len(ex) != len(ok):
            raise ValueError("class_examples and class_correct differ in length")
        out["class_examples"], out["class_correct"] = ex, ok
    return out


def run_client(module, train, *, server, client_id, num_samples, tls=None, insecure=False,
               state_dir="state", model_file="", metrics_listen="", exit_after_rounds=0,
               call_timeout=60.0, backoff_max=5.0, linger=0.0, evaluate=None, data=None,
               eval_data=None, statistics=None):
    """Takes part in the job at `server` until it is done, training `module` in place with
    `train(module, info)` each round it is asked to.

    module: a torch.nn.Module (or a TorchScript module) with the job's architecture.
    train: called with the module, holding the round's starting weights, and a RoundInfo;
        trains it in place (any optimizer, device, augmentation or mixed precision) and
        returns the number of samples it trained on, or a dict {"samples": n, "loss": x,
        ...}. LSGD elects its leaders by that loss, so an LSGD job needs it.
    num_samples: this client's weight in FedAvg's average: the size of its data, as a C++
        client's shard size is (declared when it joins, and fixed for the job: a weight a
        client could change each round would let it outweigh the others). The count and
        metrics `train` returns go into the round log (<state_dir>/<client_id>.rounds.jsonl,
        as train_samples and metric_<name>) and the returned RoundResults.
    server: "host:port", or several comma-separated: the client fails over between them.
    tls: a Tls, or insecure=True for plaintext (local experiments only).
    state_dir: where the client keeps its residual, its update in flight and its round log
        (<client_id>.state); restarted with the same folder it carries on.
    model_file: the job's TorchScript file if this client holds it (its SHA-256 must be
        the job's); by default the coordinator's file is downloaded into state_dir/models.
    exit_after_rounds: leave after uploading this many rounds (0: stay to the end).
    evaluate: federated evaluation (the coordinator's --eval clients or both):
        evaluate(module, info) is called with the module holding a committed model (with
        this client's own tensors: its personal parameters under --local-params, its
        buffers under --buffers local) and an EvalInfo; it evaluates on
        data of the client's own that it does not train on and returns {"examples": n,
        "loss": mean, "accuracy": a} (or per-class counts "class_examples" and
        "class_correct" in place of the accuracy), or None to decline. Without it the
        client declines every request. An exception it raises costs that round's answer.
    statistics: batch normalisation statistics for the committed model (the coordinator's
        --bn-stats on): statistics(module, info) is called with the module holding a
        committed model and a StatisticsInfo; it passes up to info.batches batches of
        info.batch_size of the client's training examples, as train() feeds them but
        without augmentation, through fedlgc.reestimate_statistics(module, batches) and
        returns what that returned, or None to decline. Without it the client declines.
        An exception it raises costs that phase's answer.
    data, eval_data: anything, handed to `train` as info.data and to `evaluate` as
        info.data (and `data` to `statistics` as info.data; fedlgc-sim --python-client
        passes each client's Shard and held-out Shard).

    Returns the RoundResults of the rounds it trained. When the job ends, the module holds
    its final global model (downloaded after the last round; beside this client's own
    personal parameters and, with --buffers local, buffers; the job's frozen parameters
    as the model file has them): save it with torch.save(module.state_dict(), ...) or
    torch.jit.save. A client that leaves early (exit_after_rounds, Ctrl-C) keeps its last
    local weights. Ctrl-C stops the client (its state is on disk); an exception raised by
    `train` ends it and is raised here.
    """
    if tls is None and not insecure:
        raise ValueError("give tls=fedlgc.Tls(ca, cert, key), or insecure=True")
    options = {
        "server": server, "client_id": client_id, "state_dir": state_dir,
        "insecure": bool(insecure), "model": model_file, "metrics_listen": metrics_listen,
        "exit_after_rounds": int(exit_after_rounds), "call_timeout_s": float(call_timeout),
        "backoff_max_s": float(backoff_max), "linger_s": float(linger),
        # The client sets libtorch's thread count, which the user's torch shares.
        "torch_threads": torch.get_num_threads(),
    }
    if tls is not None:
        options.update(tls_ca=tls.ca, tls_cert=tls.cert, tls_key=tls.key,
                       tls_server_name=tls.server_name)
    history = []
    checked = {}
    initial = {}
    own_path = os.path.join(state_dir, f"{client_id}.own")

    def load(weights, info):
        """The C++ client's weights into the module: the job's frozen parameters frozen
        and its layout checked once (and this client's own tensors loaded, its personal
        parameters and, under --buffers local, its buffers, which the module then keeps
        across rounds); returns the module's flat tensors."""
        buffers, local = info["buffers"], frozenset(info["local_params"])
        if "frozen_values" in info:  # told once: the job's values of what does not travel
            initial["frozen"] = info["frozen_values"]
            initial["own"] = info["initial_own"]
        if checked.get("layout") != (buffers, len(info["layout"])):
            _flat.freeze(module, info["frozen"], initial.get("frozen"))
            _flat.check_layout(module, buffers, info["layout"], local)
            checked["layout"] = (buffers, len(info["layout"]))
            if (buffers == "local" or local) and not _flat.load_local(module, own_path,
                                                                      buffers, local):
                _flat.set_local(module, initial.get("own"), buffers, local)
        tensors = _flat.flat_tensors(module, buffers, local)
        _flat.load(tensors, weights)
        return tensors

    def round_fn(weights, info):
        tensors = load(weights, info)
        prox_mu = float(info.get("prox_mu", 0.0))
        anchor = tuple(p.detach().clone() for p in module.parameters()
                       if p.requires_grad and p.numel() > 0) if prox_mu > 0 else ()
        flat_correction = info.get("scaffold_correction")
        scaffold = flat_correction is not None
        correction = (_scaffold_correction(module, flat_correction,
                                           frozenset(info["local_params"]))
                      if scaffold else ())
        own = ("data", "prox_mu", "scaffold", "_anchor", "_used", "_correction", "_steps")
        round_info = RoundInfo(**{f.name: info[f.name] for f in dataclasses.fields(RoundInfo)
                                  if f.name not in own},
                               data=data, prox_mu=prox_mu, _anchor=anchor, scaffold=scaffold,
                               _correction=correction)
        start = time.monotonic()
        samples, metrics = _parse_result(train(module, round_info))
        seconds = time.monotonic() - start
        if prox_mu > 0 and not round_info._used:
            raise ValueError(f"this job runs FedProx (--algorithm fedprox(mu={prox_mu:g})): "
                             "train() must add fedlgc.proximal_term(module, info) to its loss")
        if scaffold and round_info._steps["steps"] == 0:
            raise ValueError("this job runs SCAFFOLD (--algorithm scaffold): train() must call "
                             "fedlgc.scaffold_step(module, info, optimizer) after each "
                             "optimizer.step()")
        _flat.store(tensors, weights)
        if info["buffers"] == "local" or info["local_params"]:
            _flat.save_local(module, own_path, info["buffers"], frozenset(info["local_params"]))
        history.append(RoundResult(info["round"], samples, metrics, seconds))
        loss = metrics.get("loss")
        if loss is None and info["mode"] == "lsgd":
            raise ValueError("LSGD elects its leaders by their loss: train() must return "
                             "{'samples': n, 'loss': x}")
        figures = {"train_samples": float(samples)}
        figures.update({f"metric_{k}": v for k, v in metrics.items()})
        steps = (round_info._steps["steps"], round_info._steps["lr_sum"])
        return loss, seconds, figures, steps

    def final_fn(weights, info):
        # The job's final global model into the module (beside this client's own tensors).
        load(weights, info)
        final["version"] = info["model_version"]

    def eval_fn(weights, info):
        load(weights, info)
        return _parse_eval(evaluate(module, EvalInfo(info["round"], info["model_version"],
                                                     eval_data)))

    def stats_fn(weights, info):
        load(weights, info)
        got = statistics(module, StatisticsInfo(info["round"], info["model_version"],
                                                info["batches"], info["batch_size"],
                                                info["seed"], data))
        return _parse_statistics(got, module)

    final = {}
    client = _fedlgc.Client(options, round_fn, int(num_samples), final_fn,
                            eval_fn if evaluate is not None else None,
                            stats_fn if statistics is not None else None)
    errors = []

    def body():
        try:
            client.run()
        except BaseException as e:  # noqa: BLE001 (raised again in the caller's thread)
            errors.append(e)

    worker = threading.Thread(target=body, name=f"fedlgc-{client_id}", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.25)
    except KeyboardInterrupt:
        client.stop()
        worker.join()
        raise
    if errors:
        raise errors[0]
    return history
