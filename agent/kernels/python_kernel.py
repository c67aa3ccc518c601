# berth code-context kernel for Python. The agent starts one per context and
# talks to it over two pipes: requests (one JSON object a line) on fd 3,
# events (one JSON object a line) on fd 4. stdout/stderr of Python code are
# captured as events, so their order relative to results is exact; fds 1 and
# 2 still go to the agent for subprocess and C-level output.
import ast, asyncio, base64, builtins, inspect, io, json, os, signal, sys, threading, traceback

_ctl_in = os.fdopen(3, "r", encoding="utf-8", errors="replace")
_ctl_out = os.fdopen(4, "w", encoding="utf-8")
_ctl_lock = threading.Lock()
# Must match syncMark in agent/interp_kernel.go.
_SYNC = b"\x00\x01berth-sync\x01\x00"


def _emit(ev):
    data = json.dumps(ev, default=str) + "\n"
    with _ctl_lock:
        _ctl_out.write(data)
        _ctl_out.flush()


class _Stream(io.TextIOBase):
    def __init__(self, name):
        self._name = name
        self._buf = ""
        self._lock = threading.Lock()

    @property
    def encoding(self):
        return "utf-8"

    def writable(self):
        return True

    def isatty(self):
        return False

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        with self._lock:
            self._buf += s
            i = self._buf.rfind("\n")
            if i < 0 and len(self._buf) < 8192:
                return len(s)
            if i < 0:
                i = len(self._buf) - 1
            out, self._buf = self._buf[: i + 1], self._buf[i + 1 :]
        _emit({"type": self._name, "text": out})
        return len(s)

    def flush(self):
        with self._lock:
            out, self._buf = self._buf, ""
        if out:
            _emit({"type": self._name, "text": out})


sys.stdout = _Stream("stdout")
sys.stderr = _Stream("stderr")

_REPRS = [
    ("_repr_html_", "html"), ("_repr_markdown_", "markdown"), ("_repr_svg_", "svg"),
    ("_repr_png_", "png"), ("_repr_jpeg_", "jpeg"), ("_repr_json_", "json"),
    ("_repr_latex_", "latex"), ("_repr_javascript_", "javascript"),
]


def _figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode()


def _format(obj, main):
    d = {"isMainResult": main}
    if not isinstance(obj, type):
        for meth, key in _REPRS:
            f = getattr(obj, meth, None)
            if not callable(f):
                continue
            try:
                v = f()
            except Exception:
                continue
            if isinstance(v, tuple):
                v = v[0]
            if v is None:
                continue
            if key in ("png", "jpeg"):
                if isinstance(v, (bytes, bytearray)):
                    v = base64.b64encode(bytes(v)).decode()
            elif key == "json":
                try:
                    json.dumps(v)
                except Exception:
                    continue
            else:
                v = str(v)
            d[key] = v
        mpl = sys.modules.get("matplotlib.figure")
        if mpl is not None and isinstance(obj, mpl.Figure) and "png" not in d:
            d["png"] = _figure_png(obj)
    if isinstance(obj, (dict, list)) and "json" not in d:
        try:
            json.dumps(obj)
            d["json"] = obj
        except Exception:
            pass
    try:
        d["text"] = repr(obj)
    except Exception as e:
        d["text"] = "<repr failed: %s>" % e
    return d


def display(*objs):
    for o in objs:
        _emit({"type": "result", "result": _format(o, False)})


builtins.display = display
_ns = {"__name__": "__main__", "__builtins__": builtins, "display": display}


def _flush_figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in plt.get_fignums():
        fig = plt.figure(num)
        try:
            _emit({"type": "result", "result": {"isMainResult": False, "png": _figure_png(fig), "text": repr(fig)}})
        except Exception as e:
            _emit({"type": "stderr", "text": "berth: could not render figure: %s\n" % e})
    plt.close("all")


def _run_code(src, count):
    name = "<cell-%d>" % count
    flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
    tree = ast.parse(src, name, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    for node, mode in ((tree, "exec"), (last, "eval")):
        if node is None:
            continue
        co = compile(node, name, mode, flags=flags, dont_inherit=True)
        v = eval(co, _ns)
        if co.co_flags & inspect.CO_COROUTINE:
            v = asyncio.new_event_loop().run_until_complete(v)
        if mode == "eval" and v is not None:
            _ns["_"] = v
            _emit({"type": "result", "result": _format(v, True)})


def _error(e):
    tb = e.__traceback__
    # Drop the kernel's own frames: the user's start at <cell-N>.
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(e), e, tb))
    _emit({"type": "error", "error": {"name": type(e).__name__, "value": str(e), "traceback": text}})


def _main():
    count = 0
    # SIGINT is ignored while idle so a late interrupt cannot hit the
    # kernel's own bookkeeping; it raises KeyboardInterrupt only while user
    # code runs.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _emit({"type": "ready", "pid": os.getpid()})
    while True:
        line = _ctl_in.readline()
        if not line:
            return
        req = json.loads(line)
        count += 1
        env = req.get("env") or {}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                _run_code(req.get("code", ""), count)
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        except BaseException as e:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:
                pass
            _error(e)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            _flush_figures()
        except Exception as e:
            _emit({"type": "stderr", "text": "berth: %s\n" % e})
        for fd in (1, 2):
            try:
                os.write(fd, _SYNC)
            except OSError:
                pass
        _emit({"type": "complete", "executionCount": count})


_main()
