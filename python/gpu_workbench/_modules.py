"""The model's modules: where each was defined, the first step's summary, and errors raised inside one.

- **Where a module was defined.** ``Module.__init__`` is wrapped: a module made from the user's code
  records the first frame outside torch, the Python libraries and the companion, skipping the
  ``__init__`` frames of the module itself (``super().__init__()`` in a subclass), so
  ``self.fc = nn.Linear(512, 10)`` records that line, and ``model = Net()`` that one. Cost: a few
  frames walked once per module made, nothing per step.
- **The modules in their forward.** Global forward pre- and post-hooks
  (``torch.nn.modules.module.register_module_forward_pre_hook`` / ``register_module_forward_hook``,
  torch >= 1.13): during the first optimizer step, a row per module call (depth, output shape, output
  bytes); after it, only the depth and the last module that finished with its output's shape (a few
  attribute stores per module call).
- **The first step's summary** (torchinfo-style rows, parameter totals) and its memory: parameters,
  gradients and the optimizer's state measured from their tensors after the first step, activations as
  the bytes of the leaf modules' outputs in its forward; what torch.autocast or half parameters would
  make of them, estimated from those measurements. A ``modelSummary`` message.
- **An error raised inside a module** (an uncaught exception, seen by ``sys.excepthook`` before it is
  printed): the module stack is the traceback's own ``Module._call_impl`` frames, so the module that
  failed is exact whatever the hooks saw. A shape error becomes a ``moduleError`` message (the module's
  name in the model, class, repr, where it was defined, what it expected and got, the previous module's
  output shape); an out-of-memory error an ``oomMemory`` message with the memory as far as measured.
"""
import os
import re
import sys
import weakref

from . import _channel

_OURS = os.path.dirname(os.path.abspath(__file__))
_library_re = re.compile(r"[/\\](?:site-packages|dist-packages)[/\\]|[/\\]lib[/\\]python\d[\d.]*[/\\]|^<")
_library_cache = {}

#: id(module) -> (weakref to it, file, line): where it was made in the user's code.
_sites = {}


class _State:
    def __init__(self):
        self.torch = None
        self.channel = None
        self.depth = 0
        #: The last module whose forward finished in the current top-level forward, and its output's shape.
        self.last = None
        self.last_shape = None
        #: First step: collecting rows (None once the summary was sent).
        self.rows = []
        self.row_stack = []
        self.optimizers = weakref.WeakSet()
        self.summary = None
        self.handles = []


_s = _State()
#: The most module calls the first step's rows keep (a forward of a large model is a few thousand).
MAX_ROWS = 20000


def _library(filename):
    hit = _library_cache.get(filename)
    if hit is None:
        hit = bool(_library_re.search(filename)) or os.path.abspath(filename).startswith(_OURS + os.sep)
        torch_dir = getattr(_s, "torch_dir", None)
        if torch_dir and filename.startswith(torch_dir):
            hit = True
        _library_cache[filename] = hit
    return hit


def _record_site(module, frame):
    f = frame
    while f is not None:
        code = f.f_code
        if _library(code.co_filename) or (code.co_name == "__init__" and f.f_locals.get("self") is module):
            f = f.f_back
            continue
        key = id(module)
        _sites[key] = (weakref.ref(module, lambda _ref, key=key: _sites.pop(key, None)), code.co_filename, f.f_lineno)
        return


def site_of(module):
    """(file, line) where the module was made in the user's code, or None."""
    hit = _sites.get(id(module))
    if hit is None or hit[0]() is not module:
        return None
    return hit[1], hit[2]


# --- shapes and bytes ------------------------------------------------------------------------------

def _first_tensor(value, torch, depth=0):
    if isinstance(value, torch.Tensor):
        return value
    if depth < 3 and isinstance(value, (tuple, list)):
        for v in value:
            t = _first_tensor(v, torch, depth + 1)
            if t is not None:
                return t
    if depth < 3 and isinstance(value, dict):
        for v in value.values():
            t = _first_tensor(v, torch, depth + 1)
            if t is not None:
                return t
    return None


def _tensors(value, torch, out, depth=0):
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif depth < 3 and isinstance(value, (tuple, list)):
        for v in value:
            _tensors(v, torch, out, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for v in value.values():
            _tensors(v, torch, out, depth + 1)
    return out


def _bytes(t):
    return t.numel() * t.element_size()


def _half_bytes(t, torch):
    """What the tensor would take in 16 bits: a float32 (or float64) tensor's bytes halved (quartered), others as they are."""
    if t.dtype in (torch.float32, torch.float64):
        return t.numel() * 2
    return _bytes(t)


# --- hooks -------------------------------------------------------------------------------------------

def _not_compiling():
    return False


#: ``torch.compiler.is_compiling`` (torch >= 2.1; ``torch._dynamo.is_compiling`` in 2.0): True while
#: TorchDynamo traces a compiled model, which inlines these global hooks into the graph it builds. They
#: must do nothing there: their stores into ``_s`` (the module in ``row_stack``) are side effects
#: Dynamo cannot trace, and torch 2.11's ``torch.compile`` failed on them ("UnspecializedNNModuleVariable
#: (Net) is already tracked for mutation", recorded on an H100). Tested first thing in every hook, it is
#: a constant True while tracing, so the traced graph holds nothing of the companion; eager calls pay one
#: call. A compiled model's summary has its compiled module as one row (its submodules run inside the graph).
_is_compiling = _not_compiling


def _pre_first(module, inputs):
    if _is_compiling():
        return
    _s.depth += 1
    if _s.depth == 1:
        _s.last = None
        _s.last_shape = None
    rows = _s.rows
    if rows is not None:
        if len(rows) >= MAX_ROWS:
            # No optimizer step after this many module calls (inference, an optimizer of its own): the rows
            # so far stay for an out-of-memory error, the hooks go light.
            _swap_hooks(light=True)
            return
        row = {"module": module, "depth": _s.depth, "shape": None, "outBytes": 0, "outHalfBytes": 0}
        rows.append(row)
        _s.row_stack.append(row)


def _post_first(module, inputs, output):
    if _is_compiling():
        return
    torch = _s.torch
    _s.depth = max(0, _s.depth - 1)
    t = _first_tensor(output, torch)
    shape = list(t.shape) if t is not None else None
    _s.last = module
    _s.last_shape = shape
    if _s.rows is not None and _s.row_stack and _s.row_stack[-1]["module"] is module:
        row = _s.row_stack.pop()
        row["shape"] = shape
        if not module._modules:  # a leaf: its outputs are the activations kept for the backward pass
            for x in _tensors(output, torch, []):
                row["outBytes"] += _bytes(x)
                row["outHalfBytes"] += _half_bytes(x, torch)


def _pre_light(module, inputs):
    if _is_compiling():
        return
    _s.depth += 1
    if _s.depth == 1:
        _s.last = None


def _post_light(module, inputs, output):
    if _is_compiling():
        return
    _s.depth -= 1
    _s.last = module
    torch = _s.torch
    if isinstance(output, torch.Tensor):
        _s.last_shape = output.shape  # a torch.Size: no reference to the tensor (nor its graph)
    else:
        t = _first_tensor(output, torch)
        _s.last_shape = t.shape if t is not None else None


# --- the summary and its memory ---------------------------------------------------------------------

_OPTIMIZER_SLOTS = {"Adam": 2, "AdamW": 2, "Adamax": 2, "NAdam": 2, "RAdam": 2, "Adadelta": 2, "Adagrad": 1, "RMSprop": 1, "SGD": 1, "ASGD": 2, "Rprop": 2}


def _optimizer_slots(opt):
    """Float32 copies of the parameters an optimizer keeps (estimate before its first step): Adam 2, SGD with momentum 1."""
    name = type(opt).__name__
    slots = _OPTIMIZER_SLOTS.get(name)
    if slots is None:
        return None
    defaults = getattr(opt, "defaults", {})
    if name == "SGD" and not defaults.get("momentum"):
        return 0
    if name in ("Adam", "AdamW") and defaults.get("amsgrad"):
        return 3
    if name == "RMSprop":
        return 1 + (1 if defaults.get("momentum") else 0) + (1 if defaults.get("centered") else 0)
    return slots


def _roots(rows):
    """The top-level modules of the first step with parameters (not the loss), first called first."""
    roots, seen = [], set()
    for row in rows:
        m = row["module"]
        if row["depth"] == 1 and id(m) not in seen:
            seen.add(id(m))
            roots.append(m)
    with_params = [m for m in roots if any(True for _ in m.parameters())]
    return [_unwrap(m) for m in (with_params or roots)]


def _unwrap(m):
    # DistributedDataParallel / DataParallel: names as in the user's model (fc, not module.fc).
    inner = getattr(m, "module", None)
    if type(m).__name__ in ("DistributedDataParallel", "DataParallel") and inner is not None:
        return inner
    return m


def _unique_params(roots):
    seen, out = set(), []
    for r in roots:
        for p in r.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def _part(bytes_, half, measured, note=None):
    part = {"bytes": int(bytes_), "halfBytes": int(half), "measured": bool(measured)}
    if note:
        part["note"] = note
    return part


def memory_breakdown(roots, optimizers, activations=None, after_step=True):
    """Parameters, gradients, optimizer state (measured where their tensors exist, else estimated) and
    activations, with the 16-bit estimates. ``activations``: (bytes, halfBytes, complete) or None."""
    torch = _s.torch
    params = _unique_params(roots)
    p_bytes = sum(_bytes(p) for p in params)
    p_half = sum(_half_bytes(p, torch) for p in params)
    trainable = [p for p in params if p.requires_grad]
    t_bytes = sum(_bytes(p) for p in trainable)
    t_half = sum(_half_bytes(p, torch) for p in trainable)
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        g = _part(sum(_bytes(x) for x in grads), sum(_half_bytes(x, torch) for x in grads), True)
    else:
        g = _part(t_bytes, t_half, False, "as large as the trainable parameters (no gradient existed yet)")
    ids = set(id(p) for p in params)
    state_tensors, slots, known = [], 0, True
    for opt in optimizers:
        for p, st in list(opt.state.items()):
            if id(p) in ids and isinstance(st, dict):
                state_tensors.extend(v for v in st.values() if isinstance(v, torch.Tensor))
        s = _optimizer_slots(opt)
        if s is None:
            known = False
        else:
            slots = max(slots, s)
    names = ", ".join(sorted(set(type(x).__name__ for x in optimizers)))
    if state_tensors:
        # In half parameters the state follows the parameters' dtype; a step counter (0-d) stays as it is.
        o = _part(sum(_bytes(x) for x in state_tensors), sum(_half_bytes(x, torch) if x.dim() else _bytes(x) for x in state_tensors), True)
    elif optimizers and after_step:
        o = _part(0, 0, True, "%s keeps no state" % names)  # SGD without momentum
    elif optimizers and known:
        o = _part(t_bytes * slots, t_half * slots, False, "%d cop%s of the trainable parameters (%s, before its first step)" % (slots, "y" if slots == 1 else "ies", names))
    elif optimizers:
        o = _part(0, 0, False, "unknown: %s had not stepped yet" % names)
    else:
        o = _part(0, 0, False, "no optimizer was made")
    if activations and len(activations) > 3 and activations[3]:
        a = _part(activations[0], activations[1], False, activations[3])  # (bytes, half, complete, why not measured)
    else:
        a = _part(activations[0], activations[1], True, None if activations[2] else "up to the failure") if activations else None
    parts = {"params": _part(p_bytes, p_half, True), "grads": g, "optimizerState": o}
    if a is not None:
        parts["activations"] = a
    # torch.autocast: the parameters, their gradients and the optimizer's state stay float32; the
    # activations of the ops it runs in 16 bits halve; and it caches a 16-bit copy of each weight it casts.
    cast = sum(_bytes(p) for r in roots for m in r.modules() if type(m).__name__ in _CAST_LAYERS for p in m.parameters(recurse=False) if p.dtype == torch.float32) // 2
    autocast = {"params": p_bytes, "grads": g["bytes"], "optimizerState": o["bytes"], "activations": a["halfBytes"] if a else 0, "weightCopies": cast}
    half = {"params": p_half, "grads": g["halfBytes"], "optimizerState": o["halfBytes"], "activations": a["halfBytes"] if a else 0}
    out = dict(parts)
    out["totalBytes"] = sum(v["bytes"] for v in parts.values())
    out["autocast"] = dict(autocast, totalBytes=sum(autocast.values()))
    out["halfParams"] = dict(half, totalBytes=sum(half.values()))
    return out


_CAST_LAYERS = {"Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell", "MultiheadAttention"}


def _names(roots):
    names = {}
    for r in roots:
        for name, m in r.named_modules():
            names.setdefault(id(m), name)
    return names


def _activations(rows):
    return (sum(r["outBytes"] for r in rows), sum(r["outHalfBytes"] for r in rows))


def build_summary(rows, optimizers):
    """The first step's rows (each module once, in the order first called) with totals and memory."""
    roots = _roots(rows)
    names = _names(roots)
    root_ids = set(id(r) for r in roots)
    depth0 = None
    out, seen = [], set()
    for row in rows:
        m = row["module"]
        if id(m) in seen or id(m) not in names:
            continue
        if id(m) in root_ids:
            depth0 = row["depth"]
        seen.add(id(m))
        own = list(m.parameters(recurse=False))
        out.append({
            "name": names[id(m)],
            "className": type(m).__name__,
            "depth": max(0, row["depth"] - (depth0 or 1)),
            "outputShape": row["shape"],
            "params": sum(p.numel() for p in own),
        })
    params = _unique_params(roots)
    act = _activations([r for r in rows if id(r["module"]) in names])
    # torch.compile: the compiled wrapper (OptimizedModule) is the only module the hooks see; the ones
    # inside its graph run without them (see _is_compiling), so their outputs were never measured.
    unseen = None
    if act[0] == 0 and any(type(r["module"]).__name__ == "OptimizedModule" for r in rows):
        unseen = "not measured: the model runs as a torch.compile graph, whose modules the companion does not see"
    return {
        "rows": out,
        "totalParams": sum(p.numel() for p in params),
        "trainableParams": sum(p.numel() for p in params if p.requires_grad),
        "memory": memory_breakdown(roots, list(optimizers), (act[0], act[1], True, unseen)),
    }


#: A channel line longer than 64 KiB is no message to the extension: the summary's rows are cut to fit.
MAX_SUMMARY_BYTES = 60000


def fit_rows(summary):
    """The summary with as many rows as fit in one channel line, and how many were left out."""
    import json

    rows = summary["rows"]
    room = MAX_SUMMARY_BYTES - len(json.dumps(dict(summary, rows=[])))
    kept = 0
    for row in rows:
        room -= len(json.dumps(row, separators=(",", ":"))) + 1
        if room < 0:
            break
        kept += 1
    if kept == len(rows):
        return summary
    return dict(summary, rows=rows[:kept], rowsOmitted=len(rows) - kept)


def on_step(optimizer):
    """After every optimizer step: the first one sends the summary and lightens the hooks."""
    _s.depth = 0
    if optimizer is not None:
        _s.optimizers.add(optimizer)
    if _s.rows is None:
        return
    rows, _s.rows, _s.row_stack = _s.rows, None, []
    try:
        _s.summary = build_summary(rows, [optimizer] if optimizer is not None else list(_s.optimizers))
        _s.summary_rows = rows
        _s.summary_roots = _roots(rows)
        if _s.channel is not None and _s.summary["rows"]:
            _s.channel.send(dict(_channel.rank_fields(), type="modelSummary", **fit_rows(_s.summary)))
    finally:
        _swap_hooks(light=True)


# --- errors -----------------------------------------------------------------------------------------

_patterns = [
    # Linear: "mat1 and mat2 shapes cannot be multiplied (64x2048 and 512x10)"
    (re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)"),
     lambda m: ("input with %s features (in_features)" % m.group(3), "input of %sx%s: %s features" % (m.group(1), m.group(2), m.group(2)))),
    # Conv: "Given groups=1, weight of size [16, 3, 3, 3], expected input[64, 1, 28, 28] to have 3 channels, but got 1 channels instead"
    (re.compile(r"expected input\[([\d, ]+)\] to have (\d+) channels, but got (\d+) channels"),
     lambda m: ("input with %s channels" % m.group(2), "input [%s] with %s channels" % (m.group(1), m.group(3)))),
    # Conv on a flat input: "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [64, 784]"
    (re.compile(r"Expected (.+?) input to (\w+), but got input of size: \[([\d, ]*)\]"),
     lambda m: ("%s input" % m.group(1), "input of size [%s]" % m.group(3))),
    # view / reshape: "shape '[-1, 512]' is invalid for input of size 1000"
    (re.compile(r"shape '\[([-\d, ]*)\]' is invalid for input of size (\d+)"),
     lambda m: ("a shape [%s] whose size divides the input's" % m.group(1), "an input of %s elements" % m.group(2))),
    # RNN / LSTM / GRU: "input.size(-1) must be equal to input_size. Expected 10, got 20"
    (re.compile(r"input\.size\(-1\) must be equal to input_size\. Expected (\d+), got (\d+)"),
     lambda m: ("input_size %s (the input's last dimension)" % m.group(1), "inputs whose last dimension is %s" % m.group(2))),
    # RNN with a wrong number of dimensions: "input must have 3 dimensions, got 2"
    (re.compile(r"input must have (\d+) dimensions, got (\d+)"),
     lambda m: ("an input of %s dimensions" % m.group(1), "%s dimensions" % m.group(2))),
    # BatchNorm: "running_mean should contain 10 elements not 20"
    (re.compile(r"running_mean should contain (\d+) elements not (\d+)"),
     lambda m: ("%s features (num_features)" % m.group(1), "%s features" % m.group(2))),
    # Elementwise: "The size of tensor a (10) must match the size of tensor b (20) at non-singleton dimension 1"
    (re.compile(r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)"),
     lambda m: ("matching sizes at dimension %s" % m.group(3), "%s and %s" % (m.group(1), m.group(2)))),
]

_oom = re.compile(r"out of memory|DefaultCPUAllocator: can't allocate memory|not enough memory", re.I)


def shape_error(message):
    """(expected, got) for a shape error's message, or None when it is no shape error we know."""
    for pattern, words in _patterns:
        m = pattern.search(message)
        if m:
            return words(m)
    return None


def _call_frames(tb):
    """The modules in their forward when the exception was raised, outermost first: the traceback's own Module._call_impl frames."""
    codes = _s.call_codes
    mods = []
    while tb is not None:
        f = tb.tb_frame
        if f.f_code in codes:
            m = f.f_locals.get("self")
            if m is not None:
                mods.append(m)
        tb = tb.tb_next
    return mods


def _user_frame(tb):
    """The innermost frame of the traceback in the user's code: (file, line)."""
    where = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _library(code.co_filename):
            where = (code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    return where


def _shape_text(shape):
    if shape is None:
        return None
    try:
        return [int(x) for x in shape]
    except (TypeError, ValueError):
        t = _first_tensor(shape, _s.torch)
        return [int(x) for x in t.shape] if t is not None else None


def analyse(err):
    """The channel message for an uncaught exception (moduleError, oomMemory), or None."""
    torch = _s.torch
    if torch is None or not isinstance(err, Exception):
        return None
    tb = err.__traceback__
    message = str(err)
    raised = _user_frame(tb)
    stack = _call_frames(tb)
    base = dict(_channel.rank_fields(), exception={"type": _type_name(err), "message": message[:4000]})
    if raised:
        base["raisedAt"] = {"file": raised[0], "line": raised[1]}
    if _oom.search(message) or type(err).__name__ == "OutOfMemoryError":
        rows = _s.rows if _s.rows is not None else getattr(_s, "summary_rows", [])
        roots = _roots(rows) if rows else [_unwrap(m) for m in stack[:1]]
        if not roots:
            return None
        names = _names(roots)
        act = _activations([r for r in rows if id(r["module"]) in names]) if rows else None
        complete = _s.rows is None
        memory = memory_breakdown(roots, list(_s.optimizers), (act[0], act[1], complete) if act else None, after_step=_s.rows is None)
        return dict(base, type="oomMemory", firstStepDone=complete, memory=memory)
    found = shape_error(message)
    if not stack or found is None:
        return None
    module = stack[-1]
    # Its name in the model: the first step's model when it is part of it (a submodule called on its
    # own later), else the outermost module in its forward.
    root = _unwrap(stack[0])
    for r in getattr(_s, "summary_roots", []):
        if any(m is module for m in r.modules()):
            root = r
            break
    names = _names([root])
    name = names.get(id(module), "")
    out = dict(base, type="moduleError", module=name, className=type(module).__name__, repr=_repr(module))
    out["expected"], out["got"] = found
    site = site_of(module)
    if site:
        out["definedAt"] = {"file": site[0], "line": site[1]}
    if module is not root:
        out["model"] = type(root).__name__
    prev = _s.last
    if prev is not None and prev is not module and _s.last_shape is not None:
        out["previous"] = {"module": names.get(id(prev), ""), "className": type(prev).__name__, "outputShape": _shape_text(_s.last_shape)}
        prev_site = site_of(prev)
        if prev_site:
            out["previous"]["definedAt"] = {"file": prev_site[0], "line": prev_site[1]}
    return out


def _type_name(err):
    t = type(err)
    mod = t.__module__
    return t.__qualname__ if mod in ("builtins", "__main__") else "%s.%s" % (mod, t.__qualname__)


def _repr(module):
    try:
        text = repr(module)
    except Exception:  # a user's __repr__ that fails
        return type(module).__name__
    if "\n" in text:
        return type(module).__name__ + "(...)"
    return text if len(text) <= 300 else text[:299] + "\u2026"


# --- installing -------------------------------------------------------------------------------------

def _compiling_check(torch):
    """torch's own "is Dynamo tracing now?" (see ``_is_compiling``), or one that always says no (torch 1.x)."""
    compiler = getattr(torch, "compiler", None)
    check = getattr(compiler, "is_compiling", None)
    if check is None and hasattr(torch, "compile"):  # torch 2.0: only torch._dynamo has it
        try:
            import torch._dynamo as dynamo

            check = getattr(dynamo, "is_compiling", None)
        except Exception:
            check = None
    return check if callable(check) else _not_compiling


def _swap_hooks(light):
    import torch.nn.modules.module as mm

    for h in _s.handles:
        h.remove()
    pre, post = (_pre_light, _post_light) if light else (_pre_first, _post_first)
    _s.handles = [mm.register_module_forward_pre_hook(pre), mm.register_module_forward_hook(post)]


def install(torch, channel):
    """Hooks Module.__init__ (where modules are made), the forward of every module, and sys.excepthook."""
    import torch.nn.modules.module as mm

    if not hasattr(mm, "register_module_forward_hook"):
        return None
    global _is_compiling
    _s.torch = torch
    _s.channel = channel
    _is_compiling = _compiling_check(torch)
    _s.torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    _library_cache.clear()
    Module = torch.nn.Module
    _s.call_codes = set(getattr(getattr(Module, n, None), "__code__", None) for n in ("_call_impl", "_wrapped_call_impl")) - {None}

    original_init = Module.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        try:
            _record_site(self, sys._getframe(1))
        except Exception:
            pass

    init.__wrapped__ = original_init
    Module.__init__ = init

    Optimizer = torch.optim.Optimizer
    opt_init = Optimizer.__init__

    def optimizer_init(self, *args, **kwargs):
        opt_init(self, *args, **kwargs)
        _s.optimizers.add(self)

    optimizer_init.__wrapped__ = opt_init
    Optimizer.__init__ = optimizer_init

    _swap_hooks(light=False)

    previous = sys.excepthook

    def excepthook(kind, value, tb):
        try:
            message = analyse(value)
            if message is not None and _s.channel is not None:
                _s.channel.send(message)
        except Exception as err:  # never hide the user's own error
            sys.stderr.write("gpu_workbench: could not read the error's module (%s: %s)\n" % (type(err).__name__, err))
        previous(kind, value, tb)

    sys.excepthook = excepthook
    return "module-hooks"
