# berth code-context driver for Python. The agent starts one per context;
# it starts an IPython kernel (ipykernel) as its child, in its own process
# group, and drives it over the Jupyter protocol with jupyter_client.
#
# Agent side (see agent/interp_kernel.go): requests (one JSON object a line)
# on fd 3, events (one JSON object a line) on fd 4, SIGINT interrupts the
# running cell. The kernel's own setup code (formatters for DataFrame data
# and matplotlib charts) is argv[1] (agent/kernels/python_setup.py).
import importlib.util, json, math, os, queue, shutil, signal, subprocess, sys, tempfile, threading, time

_ctl_in = os.fdopen(3, "r", encoding="utf-8", errors="replace")
_ctl_out = os.fdopen(4, "w", encoding="utf-8")
# Must match syncMark in agent/interp_kernel.go.
_SYNC = b"\x00\x01berth-sync\x01\x00"
# Must match the MIME types of python_setup.py.
_DATA_MIME = "application/vnd.berth.data+json"
_CHART_MIME = "application/vnd.berth.chart+json"
_FIELDS = {
    "text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/svg+xml": "svg",
    "image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf", "text/latex": "latex",
    "application/json": "json", "application/javascript": "javascript",
    _DATA_MIME: "data", _CHART_MIME: "chart",
}


def _clean(v):
    # JSON without NaN/Infinity (the agent's parser refuses them).
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def _emit(ev):
    try:
        data = json.dumps(ev, allow_nan=False, default=str)
    except ValueError:
        data = json.dumps(_clean(ev), default=str)
    _ctl_out.write(data + "\n")
    _ctl_out.flush()


def _fail(msg, code=3):
    sys.stderr.write("berth: " + msg + "\n")
    sys.stderr.flush()
    sys.exit(code)


for _m in ("ipykernel", "jupyter_client"):
    if importlib.util.find_spec(_m) is None:
        _fail("a python code context runs an IPython kernel: %s is not installed in this image "
              "(Debian: apt-get install python3-ipykernel python3-jupyter-client; else pip install ipykernel)" % _m)

_rundir = tempfile.mkdtemp(prefix="berth-kernel-")  # 0700, owned by the context's user
_proc = None
_running = False
_interrupts = 0


def _cleanup():
    shutil.rmtree(_rundir, ignore_errors=True)


def _exit_like_kernel():
    # The kernel died: end the driver the same way, so the agent's error
    # names the kernel's exit code or signal.
    rc = _proc.poll()
    _cleanup()
    _ctl_out.flush()
    if rc is not None and rc < 0:
        signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
        time.sleep(1)
    os._exit(rc if rc is not None and rc >= 0 else 1)


def _on_sigint(signum, frame):
    global _interrupts
    if _running and _proc is not None and _proc.poll() is None:
        _interrupts += 1
        os.kill(_proc.pid, signal.SIGINT)


_started = False


def _pump_echo(f):
    while True:
        b = f.read1(65536) if hasattr(f, "read1") else f.read(65536)
        if not b:
            return
        if not _started:
            try:
                os.write(2, b)
            except OSError:
                pass


def _start():
    global _proc
    conn = os.path.join(_rundir, "kernel.json")
    # ipc transport: unix sockets in the private run dir, so no other user
    # of the sandbox can reach the kernel (the HMAC key signs every message
    # on top of that). The dir is new, so the socket names are free.
    info = {"transport": "ipc", "ip": os.path.join(_rundir, "k"), "key": os.urandom(32).hex(),
            "signature_scheme": "hmac-sha256", "kernel_name": "",
            "shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5}
    fd = os.open(conn, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    env = dict(os.environ)
    env["JPY_PARENT_PID"] = str(os.getpid())  # the kernel exits if the driver dies
    env.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # debugpy's start up check
    home = os.path.expanduser("~")
    if "IPYTHONDIR" not in env and not os.access(home, os.W_OK):
        env["IPYTHONDIR"] = os.path.join(_rundir, "ipython")
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", conn,
            "--HistoryManager.enabled=False", "--InteractiveShell.colors=NoColor"]
    # Same process group as the driver: the agent's kill of the group ends
    # the kernel and whatever the code started.
    # The kernel's fds 1 and 2 are a pipe the driver reads: ipykernel sends
    # fd-level output (subprocesses) as stream messages and also echoes it
    # there, so after start up it is dropped; before, it goes to the agent
    # (a kernel that fails to start says why).
    _proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env=env, close_fds=True)
    threading.Thread(target=_pump_echo, args=(_proc.stdout,), daemon=True).start()
    # Imported while the kernel starts: the two overlap.
    from jupyter_client import BlockingKernelClient
    kc = BlockingKernelClient(connection_file=conn)
    kc.load_connection_file()
    kc.start_channels()
    deadline = time.monotonic() + 110  # the agent waits 120 s (pythonStartTimeout)
    while True:
        if _proc.poll() is not None:
            _exit_like_kernel()
        try:
            kc.wait_for_ready(timeout=1)
            break
        except RuntimeError:
            if time.monotonic() > deadline:
                _fail("the IPython kernel did not start in time")
    return kc


def _result(content, main):
    r = {"isMainResult": main}
    extra = {}
    for mime, v in (content.get("data") or {}).items():
        f = _FIELDS.get(mime)
        if f is None:
            extra[mime] = v
            continue
        if f in ("png", "jpeg", "pdf") and isinstance(v, str):
            v = "".join(v.split())
        r[f] = v
    if extra:
        r["extra"] = extra
    return r


def _execute(kc, code, silent, on_msg=None):
    """Runs code, calls on_msg for each iopub message of it, and returns
    the execution count and the reply's content (None if no reply came).
    Exits if the kernel dies."""
    global _interrupts
    msg_id = kc.execute(code, silent=silent, store_history=not silent, allow_stdin=False, stop_on_error=False)
    count = 0
    errored = False
    last_int = 0.0
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=0.2)
        except queue.Empty:
            if _proc.poll() is not None:
                _exit_like_kernel()
            # An interrupt may hit the kernel before it runs the cell (it
            # ignores SIGINT while idle): repeat it until the cell ends.
            if _interrupts and not errored and time.monotonic() - last_int > 1:
                last_int = time.monotonic()
                _on_sigint(signal.SIGINT, None)
            continue
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        t, c = msg["msg_type"], msg["content"]
        if t == "status" and c.get("execution_state") == "idle":
            break
        if t == "execute_input":
            count = c.get("execution_count") or count
        elif t == "error":
            errored = True
        if on_msg is not None:
            on_msg(t, c)
    content = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            reply = kc.get_shell_msg(timeout=0.5)
        except queue.Empty:
            if _proc.poll() is not None:
                _exit_like_kernel()
            continue
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            content = reply["content"]
            count = content.get("execution_count") or count
            break
    return count, dict(content or {}, _errored=errored)


def _forward(t, c):
    if t == "stream":
        _emit({"type": "stderr" if c.get("name") == "stderr" else "stdout", "text": c.get("text", "")})
    elif t in ("execute_result", "display_data"):
        _emit({"type": "result", "result": _result(c, t == "execute_result")})
    elif t == "error":
        _emit({"type": "error", "error": {"name": c.get("ename", ""), "value": c.get("evalue", ""),
                                          "traceback": "\n".join(c.get("traceback") or [])}})


def _main():
    global _running, _interrupts, _started
    signal.signal(signal.SIGINT, _on_sigint)
    kc = _start()
    setup = sys.argv[1] if len(sys.argv) > 1 else ""
    setup_errors = []
    _execute(kc, setup, True, lambda t, c: setup_errors.append(c) if t == "error" else None)
    if setup_errors:
        e = setup_errors[0]
        sys.stderr.write("berth: kernel setup failed: %s: %s\n" % (e.get("ename"), e.get("evalue")))
    _started = True
    _emit({"type": "ready", "pid": os.getpid()})
    while True:
        line = _ctl_in.readline()
        if not line:
            break
        req = json.loads(line)
        env = req.get("env") or {}
        if env:
            _execute(kc, "__import__('_berth').push_env(%r)" % ({str(k): (None if v is None else str(v)) for k, v in env.items()},), True)
        _interrupts = 0
        _running = True
        try:
            count, reply = _execute(kc, req.get("code", ""), False, _forward)
        finally:
            _running = False
        if reply.get("status") == "error" and not reply["_errored"]:
            # IPython reports an interrupt only in the reply (and as text on
            # stderr): it is the run's error all the same.
            name = reply.get("ename") or ("KeyboardInterrupt" if _interrupts else "Error")
            _forward("error", {"ename": name, "evalue": reply.get("evalue", ""),
                               "traceback": reply.get("traceback") or [name]})
        if env:
            _execute(kc, "__import__('_berth').pop_env()", True)
        for fd in (1, 2):
            try:
                os.write(fd, _SYNC)
            except OSError:
                pass
        _emit({"type": "complete", "executionCount": count})
    try:
        _proc.terminate()
        _proc.wait(5)
    except Exception:
        pass
    _cleanup()


try:
    _main()
finally:
    _cleanup()
