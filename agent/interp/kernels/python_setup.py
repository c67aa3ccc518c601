# Runs once inside the IPython kernel of a berth python context, silently,
# before the first cell (python_kernel.py sends it). It adds display
# formatters and leaves nothing in the user's namespace but module _berth.
def __berth_setup():
    import importlib.abc, importlib.util, json, math, os, re, sys, types

    ip = get_ipython()  # noqa: F821 (IPython builtin)
    from IPython.core.formatters import BaseFormatter, PlainTextFormatter
    from traitlets import ObjectName, Unicode

    mod = types.ModuleType("_berth")
    sys.modules["_berth"] = mod

    # Per-run env (RunCodeRequest.env): set before the cell, restored after.
    saved = []

    def push_env(env):
        saved.append({k: os.environ.get(k) for k in env})
        for k, v in env.items():
            if v is None:  # null: unset for this run
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def pop_env():
        for k, v in (saved.pop() if saved else {}).items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    mod.push_env, mod.pop_env = push_env, pop_env

    # A str result shows as the string itself, not its repr (nested strs
    # inside containers keep their quotes: only the top level changes).
    class StrPlain(PlainTextFormatter):
        def __call__(self, obj):
            if type(obj) is str:
                return obj
            return super().__call__(obj)

    ip.display_formatter.formatters["text/plain"].__class__ = StrPlain

    # dict and list results also carry application/json (berth's kernel
    # always did), when they are JSON as they are.
    def as_json(obj):
        try:
            json.dumps(obj, allow_nan=False)
        except (TypeError, ValueError):
            return None
        return obj

    jf = ip.display_formatter.formatters["application/json"]
    jf.for_type(dict, as_json)
    jf.for_type(list, as_json)

    def num(v):
        try:
            f = float(v)
        except (TypeError, ValueError):
            return str(v)
        return f if math.isfinite(f) else None

    # DataFrame data: {column: [values]}, as E2B's interpreter gives it.
    max_cells = 200000

    def frame_data(df):
        if df.size > max_cells:
            return None
        out = {}
        for c in df.columns:
            out[str(c)] = json.loads(df[c].to_json(orient="values", date_format="iso"))
        return out

    class DataFormatter(BaseFormatter):
        format_type = Unicode("application/vnd.berth.data+json")
        print_method = ObjectName("_repr_berth_data_")
        _return_type = (dict,)

    df_fmt = DataFormatter(parent=ip.display_formatter)
    df_fmt.for_type_by_name("pandas.core.frame", "DataFrame", frame_data)
    ip.display_formatter.formatters[df_fmt.format_type] = df_fmt

    # Charts: E2B's typed chart of a matplotlib figure, read from its axes.
    unit_re = re.compile(r"\s\((.*?)\)|\[(.*?)\]")

    def text_or_none(s):
        return s if s else None

    def unit(label):
        m = unit_re.search(label or "")
        return (m.group(1) or m.group(2)) if m else None

    def base2d(ax, typ):
        xl, yl = text_or_none(ax.get_xlabel()), text_or_none(ax.get_ylabel())
        return {"type": typ, "title": text_or_none(ax.get_title()), "x_label": xl, "y_label": yl,
                "x_unit": unit(xl), "y_unit": unit(yl), "elements": []}

    def scale(axis, name):
        conv = getattr(axis, "converter", None) or getattr(axis, "get_converter", lambda: None)()
        cname = type(conv).__module__ + "." + type(conv).__name__ if conv is not None else ""
        if "dates" in cname:
            return "datetime"
        if "category" in cname:
            return "categorical"
        return name

    def axis_value(v, sc, axis):
        if sc == "datetime":
            from matplotlib import dates
            try:
                return dates.num2date(float(v)).isoformat()
            except Exception:
                return str(v)
        if sc == "categorical":
            try:
                return axis.get_major_formatter()(v, None)
            except Exception:
                return str(v)
        return num(v)

    def point_chart(ax, typ, series):
        ch = base2d(ax, typ)
        xs, ys = scale(ax.xaxis, ax.get_xscale()), scale(ax.yaxis, ax.get_yscale())
        ch["x_scale"], ch["y_scale"] = xs, ys
        ch["x_ticks"] = [axis_value(v, xs, ax.xaxis) for v in ax.get_xticks()]
        ch["x_tick_labels"] = [t.get_text() for t in ax.get_xticklabels()]
        ch["y_ticks"] = [axis_value(v, ys, ax.yaxis) for v in ax.get_yticks()]
        ch["y_tick_labels"] = [t.get_text() for t in ax.get_yticklabels()]
        for label, pts in series:
            ch["elements"].append({"label": label, "points": [
                [axis_value(x, xs, ax.xaxis), axis_value(y, ys, ax.yaxis)] for x, y in pts]})
        return ch

    def tick_label(axis, ticks, labels, v):
        for t, l in zip(ticks, labels):
            if abs(float(t) - v) < 1e-6 and l.get_text():
                return l.get_text()
        try:
            return str(axis.get_major_formatter()(v, None))
        except Exception:
            return str(v)

    def bar_chart(ax, containers):
        ch = base2d(ax, "bar")
        for i, cont in enumerate(containers):
            group = cont.get_label()
            if not group or group.startswith("_"):
                group = str(i)
            horizontal = getattr(cont, "orientation", "vertical") == "horizontal"
            if horizontal:
                axis, ticks, labels = ax.yaxis, ax.get_yticks(), ax.get_yticklabels()
            else:
                axis, ticks, labels = ax.xaxis, ax.get_xticks(), ax.get_xticklabels()
            for r in cont.patches:
                if horizontal:
                    pos, val = r.get_y() + r.get_height() / 2, r.get_width()
                else:
                    pos, val = r.get_x() + r.get_width() / 2, r.get_height()
                ch["elements"].append({"label": tick_label(axis, ticks, labels, pos), "value": num(val), "group": group})
        if containers and getattr(containers[0], "orientation", "vertical") == "horizontal":
            # The categories are on y: report them as the x axis, as E2B does.
            ch["x_label"], ch["y_label"] = ch["y_label"], ch["x_label"]
            ch["x_unit"], ch["y_unit"] = ch["y_unit"], ch["x_unit"]
        return ch

    def box_chart(ax, boxes):
        ch = base2d(ax, "box_and_whisker")
        if boxes and not boxes[0][1]:
            ch["x_label"], ch["y_label"] = ch["y_label"], ch["x_label"]
            ch["x_unit"], ch["y_unit"] = ch["y_unit"], ch["x_unit"]
        for i, (st, _vertical, label) in enumerate(boxes):
            ch["elements"].append({
                "label": label if label is not None else str(i + 1),
                "min": num(st.get("whislo")), "first_quartile": num(st.get("q1")), "median": num(st.get("med")),
                "third_quartile": num(st.get("q3")), "max": num(st.get("whishi")),
                "outliers": [num(v) for v in st.get("fliers", [])]})
        return ch

    def axes_chart(ax):
        from matplotlib.collections import PathCollection
        from matplotlib.container import BarContainer
        from matplotlib.patches import Wedge

        boxes = getattr(ax, "_berth_boxes", None)
        if boxes:
            return box_chart(ax, boxes)
        lines = [l for l in ax.lines]
        colls = [c for c in ax.collections]
        patches = [p for p in ax.patches]
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        if patches and all(isinstance(p, Wedge) for p in patches) and not lines and not colls:
            return {"type": "pie", "title": text_or_none(ax.get_title()), "elements": [
                {"label": w.get_label(), "angle": num(abs(round(w.theta2 - w.theta1, 4))), "radius": num(w.r)}
                for w in patches]}
        if bars and not colls and not lines:
            return bar_chart(ax, bars)
        if lines and not colls and not patches:
            return point_chart(ax, "line", [(l.get_label(), zip(l.get_xdata(), l.get_ydata())) for l in lines])
        if colls and all(isinstance(c, PathCollection) for c in colls) and not lines and not patches:
            return point_chart(ax, "scatter", [(c.get_label(), [tuple(o) for o in c.get_offsets()]) for c in colls])
        return {"type": "unknown", "title": text_or_none(ax.get_title()), "elements": []}

    def figure_chart(fig):
        axes = [a for a in fig.get_axes() if a.get_visible()]
        if not axes:
            return None
        if len(axes) == 1:
            return axes_chart(axes[0])
        st = getattr(fig, "_suptitle", None)
        return {"type": "superchart", "title": text_or_none(st.get_text() if st is not None else ""),
                "elements": [axes_chart(a) for a in axes]}

    # Not a type printer: IPython drops every formatter's Figure printer when
    # matplotlib's inline backend starts (select_figure_formats).
    class ChartFormatter(BaseFormatter):
        format_type = Unicode("application/vnd.berth.chart+json")
        print_method = ObjectName("_repr_berth_chart_")
        _return_type = (dict,)

        def __call__(self, obj):
            fm = sys.modules.get("matplotlib.figure")
            if not self.enabled or fm is None or not isinstance(obj, fm.Figure):
                return None
            try:
                return figure_chart(obj)
            except Exception:
                return None  # a figure this cannot read still shows as PNG

    ch_fmt = ChartFormatter(parent=ip.display_formatter)
    ip.display_formatter.formatters[ch_fmt.format_type] = ch_fmt

    # Box plots: their statistics are not left on the axes as data, so
    # Axes.bxp is wrapped when matplotlib.axes is first imported, to note
    # them on the axes it draws into.
    def patch_axes(m):
        orig = m.Axes.bxp
        if getattr(orig, "_berth", False):
            return

        def bxp(self, bxpstats, *a, **k):
            out = orig(self, bxpstats, *a, **k)
            vertical = k.get("orientation", "vertical") == "vertical" and k.get("vert", True) is not False
            labels = k.get("labels") or k.get("tick_labels")
            stats = list(bxpstats)
            boxes = getattr(self, "_berth_boxes", None) or []
            for i, st in enumerate(stats):
                label = st.get("label")
                if label is None and labels is not None and i < len(labels):
                    label = labels[i]
                boxes.append((st, vertical, None if label is None else str(label)))
            self._berth_boxes = boxes
            return out

        bxp._berth = True
        m.Axes.bxp = bxp

    if "matplotlib.axes" in sys.modules:
        patch_axes(sys.modules["matplotlib.axes"])
    else:
        class Hook(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name != "matplotlib.axes":
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec(name)
                if spec is None or spec.loader is None:
                    return spec
                loader_exec = spec.loader.exec_module

                def exec_module(module):
                    loader_exec(module)
                    try:
                        patch_axes(module)
                    except Exception:
                        pass

                spec.loader.exec_module = exec_module
                return spec

        sys.meta_path.insert(0, Hook())


__berth_setup()
del __berth_setup
