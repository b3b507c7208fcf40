#!/usr/bin/python3
"""The HTML report as a person sees it: two small fedlgc-sim runs (one behind a link that
cuts a connection, evaluated on its clients too), `fedlgc-sim --html` for one and `fedlgc-report` comparing both, and a
population of 45 clients on drawn links, whose page shows distributions. Checks
that each page is self-contained, has every plot, and that its numbers are the JSON's
(per-client bytes summing to the coordinator's totals); renders the pages in headless
Chromium to PNG and checks the browser drew the plots.

    report_test.py BIN_DIR
Exit 77 (skipped) without Chromium or matplotlib.
"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image
except ImportError:
    print("skip: no matplotlib")
    sys.exit(77)
if CHROMIUM is None:
    print("skip: no chromium")
    sys.exit(77)

PLOTS = {"plot-accuracy", "plot-accuracy-bytes", "plot-accuracy-time", "plot-rounds",
         "plot-clients", "plot-population"}
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


class Page(html.parser.HTMLParser):
    """Figures with their SVGs, every tag name, and the cells' data attributes."""

    def __init__(self):
        super().__init__()
        self.tags, self.figures, self.cells, self.differs = [], {}, [], set()
        self.row_differs = False
        self.figure = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "figure":
            self.figure = a.get("id")
            self.figures[self.figure] = 0
        if tag == "svg" and self.figure is not None:
            self.figures[self.figure] += 1
        if tag == "tr":
            self.row_differs = a.get("class") == "differs"
        if tag == "td" and a.get("data-key", "").startswith("config.") and self.row_differs:
            self.differs.add(a["data-key"])
        if tag == "td" and "data-key" in a:
            self.cells.append(a)

    def handle_endtag(self, tag):
        if tag == "figure":
            self.figure = None


def parse(path):
    p = Page()
    with open(path) as f:
        p.feed(f.read())
    return p


def value(p, key, run=0):
    for c in p.cells:
        if c["data-key"] == key and c.get("data-run") == str(run):
            return json.loads(c["data-value"]) if "data-value" in c else None
    raise KeyError(key)


def sim(tmp, name, codec, extra, clients=3):
    argv = [f"{BIN}/fedlgc-sim", "--clients", str(clients), "--rounds", "4", "--data",
            "synthetic:600",
            "--model", "mlp", "--local-steps", "2", "--insecure", "--quiet", "--codec", codec,
            "--run-dir", f"{tmp}/{name}.run", "--report", f"{tmp}/{name}.json"] + extra
    r = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    print(r.stdout + r.stderr)
    assert r.returncode == 0, f"fedlgc-sim {name} failed"
    with open(f"{tmp}/{name}.json") as f:
        return json.load(f)


def render(path, png):
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1280,4200", f"--screenshot={png}",
                        "file://" + os.path.abspath(path)],
                       capture_output=True, text=True, timeout=120)
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          "file://" + os.path.abspath(path)], capture_output=True, text=True,
                         timeout=120)
    return r.returncode, dom.stdout


def check_page(path, runs, png):
    p = parse(path)
    check(set(p.figures) >= PLOTS, f"{path}: every plot ({sorted(PLOTS - set(p.figures))} missing)")
    check(all(n == 1 for n in p.figures.values()), f"{path}: one SVG per figure")
    check(not {"script", "img", "link", "iframe"} & set(p.tags),
          f"{path}: self-contained (no script, img, link or iframe)")
    for i, run in enumerate(runs):
        s = run["summary"]
        accs = [r["accuracy"] for r in run["rounds"] if r["accuracy"] >= 0]
        best = max(accs)
        check(abs(s["best_accuracy"] - best) < 1e-9 and run["rounds"][[
            r["accuracy"] for r in run["rounds"]].index(best)]["round"] == s["best_round"],
              f"{path}: run {i} best accuracy {best} and its round")
        check(abs(s["last5_mean_accuracy"] - sum(accs[-5:]) / len(accs[-5:])) < 1e-9,
              f"{path}: run {i} mean of the last five rounds")
        for key in ("final_accuracy", "uplink_bytes", "downlink_bytes", "link_cuts"):
            check(value(p, key, i) == s[key], f"{path}: run {i} {key} = {s[key]}")
        check(value(p, "rounds", i) == len(run["rounds"]), f"{path}: run {i} rounds")
        for r in run["rounds"]:
            for key in ("accuracy", "uplink_bytes", "downlink_bytes", "seconds", "participants"):
                check(value(p, f"round{r['round']}.{key}", i) == r[key],
                      f"{path}: run {i} round {r['round']} {key}")
        # Per client: the page's totals, and the coordinator's own accounting.
        sides = ("client_uplink_bytes", "client_downlink_bytes")
        clients = sorted({c for r in run["rounds"] for side in sides for c in r[side]})
        up_total = down_total = cuts_total = 0
        for c in clients:
            up = sum(r["client_uplink_bytes"].get(c, 0) for r in run["rounds"])
            down = sum(r["client_downlink_bytes"].get(c, 0) for r in run["rounds"])
            cuts = s["link_cuts_per_client"].get(c, 0)
            check(value(p, f"client.{c}.uplink_bytes", i) == up, f"{path}: run {i} {c} uplink")
            check(value(p, f"client.{c}.downlink_bytes", i) == down,
                  f"{path}: run {i} {c} downlink")
            check(value(p, f"client.{c}.link_cuts", i) == cuts, f"{path}: run {i} {c} cuts")
            up_total, down_total, cuts_total = up_total + up, down_total + down, cuts_total + cuts
        check(up_total == s["uplink_bytes"] and down_total == s["downlink_bytes"],
              f"{path}: run {i} per-client bytes sum to the run's ({up_total}, {down_total})")
        check(cuts_total == s["link_cuts"], f"{path}: run {i} per-client cuts sum to the run's")
    rc, dom = render(path, png)
    check(rc == 0 and os.path.getsize(png) > 20000, f"{path}: Chromium rendered {png}")
    check(dom.count("<svg") >= len(PLOTS), f"{path}: the browser's DOM has every plot's SVG")
    img = matplotlib.image.imread(png)
    rgb = img[..., :3]
    ink = (rgb < 0.9).any(axis=-1).mean()
    # matplotlib's first line color, tab:blue (31, 119, 180): drawn plots, not only text.
    blue = ((abs(rgb[..., 0] - 31 / 255) < 0.06) & (abs(rgb[..., 1] - 119 / 255) < 0.06)
            & (abs(rgb[..., 2] - 180 / 255) < 0.06)).sum()
    check(ink > 0.02, f"{png}: {100 * ink:.1f}% of the page is drawn on")
    check(blue > 2000, f"{png}: {blue} pixels of plotted lines and bars")
    return p


def per_client_mean(run, figure):
    """Each client's mean of a per-client figure over the rounds that have it."""
    values = {}
    for r in run["rounds"]:
        for c, v in (r.get(figure) or {}).items():
            values.setdefault(c, []).append(v)
    return [sum(v) / len(v) for v in values.values()]


def check_quantiles(path, p, key, values, run=0):
    v = sorted(values)
    check(len(v) > 0, f"{path}: run {run} has {key}")
    for q, name in ((0.1, "p10"), (0.5, "median"), (0.9, "p90")):
        want = v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] if v else None
        got = value(p, f"population.{key}.{name}", run)
        check(got is not None and want is not None and abs(got - want) < 1e-9,
              f"{path}: run {run} {key} {name} = {want}")


def check_population(path, run):
    """A population's page: each client's distribution quantiles are the JSON's, the
    per-client table is folded, and each drawn link rate is in it; with the codec ladder,
    the rungs and measured rates too, and a plot of the updates by codec."""
    p = parse(path)
    names = [f"client-{i}" for i in range(run["config"]["clients"])]
    rounds = [sum(1 for r in run["rounds"] if r["client_uplink_bytes"].get(c, 0) > 0)
              for c in names]
    up = [sum(r["client_uplink_bytes"].get(c, 0) for r in run["rounds"]) / 1e6 for c in names]
    rates = [run["summary"]["links"][c]["rate_mbit"] for c in names]
    for key, values in (("rounds", rounds), ("uplink_mb", up), ("rate_mbit", rates),
                        ("codec_rung", per_client_mean(run, "codec_rung"))):
        check_quantiles(path, p, key, values)
    measured = {}
    for r in run["rounds"]:
        measured.update(r.get("uplink_bps") or {})
    check_quantiles(path, p, "measured_up_mbit", [v * 8 / 1e6 for v in measured.values()])
    rungs = [v for r in run["rounds"] for v in (r.get("codec_rung") or {}).values()]
    check(len(rungs) == sum(r["participants"] for r in run["rounds"]),
          f"{path}: every counted update has its ladder rung")
    check(p.figures.get("plot-ladder") == 1, f"{path}: the updates by codec are plotted")
    check(sum(rounds) == sum(r["participants"] for r in run["rounds"]),
          f"{path}: the clients' rounds add up to the rounds' participants")
    with open(path) as f:
        check("<summary>Every client</summary>" in f.read(), f"{path}: the client table is folded")


def main():
    tmp = tempfile.mkdtemp(prefix="fedlgc_report_")
    # The first run's links cut the first connection past 300 KB; the clients resume. Its
    # clients evaluate each round's model on a held-out fifth of their shards too.
    a = sim(tmp, "a", "qsgd(bits=8)",
            ["--link", "rate=50mbit,cut_after=300k", "--html", f"{tmp}/a.html",
             "--eval", "both", "--eval-fraction", "0.2"])
    # The second run's rounds are buffered: its clients' updates have a staleness.
    b = sim(tmp, "b", "topk(ratio=0.1)", ["--rounds-mode", "buffered(k=2,concurrency=3)"])
    check(a["summary"]["link_cuts"] >= 1, "run a had a link cut")
    pa = check_page(f"{tmp}/a.html", [a], f"{tmp}/a.png")
    check(pa.figures.get("plot-federated") == 1, "the clients' evaluation is plotted")
    fed = [r["federated_eval"] for r in a["rounds"]]
    # Each round asks the clients connected at its commit: one whose link is being cut then
    # is not asked. Every client asked answers, and only a cut leaves one out.
    check(all(f["clients"] == f["asked"] and f["declined"] == 0 and f["missing"] == 0
              for f in fed), f"every client asked answered: {fed}")
    check(all(1 <= f["asked"] <= 3 for f in fed)
          and sum(3 - f["asked"] for f in fed) <= a["summary"]["link_cuts"],
          f"only a cut link leaves a client unasked ({a['summary']['link_cuts']} cuts): {fed}")
    check(all(value(pa, f"round{r['round']}.federated_accuracy") == r["federated_eval"]["accuracy"]
              for r in a["rounds"]), "the round table has the clients' accuracy")
    r = subprocess.run([f"{BIN}/fedlgc-report", f"{tmp}/a.json", f"{tmp}/b.json", "-o",
                        f"{tmp}/compare.html"], capture_output=True, text=True, timeout=120)
    print(r.stdout + r.stderr)
    check(r.returncode == 0, "fedlgc-report compared two runs")
    p = check_page(f"{tmp}/compare.html", [a, b], f"{tmp}/compare.png")
    check("config.codec" in p.differs and "config.clients" not in p.differs,
          f"the compare page marks the settings that differ ({sorted(p.differs)})")
    check_quantiles(f"{tmp}/compare.html", p, "staleness", per_client_mean(b, "staleness"), run=1)
    # A population: 45 clients in one process, each behind a link drawn from a lognormal,
    # each asked with the densest codec of a ladder that its measured link sends in time.
    c = sim(tmp, "c", "fp32",
            ["--fraction", "0.2", "--link", "rate=lognormal(median=20mbit,sigma=1)",
             "--codec-ladder", "fp32;qsgd(bits=8);qsgd(bits=4)", "--round-timeout", "20",
             "--html", f"{tmp}/c.html"], clients=45)
    check(c["config"]["clients_per_process"] == 250, "the population's clients share a process")
    check_page(f"{tmp}/c.html", [c], f"{tmp}/c.png")
    check_population(f"{tmp}/c.html", c)
    # A DP job: each client asked with probability 0.5, updates cut to norm 0.01, noise of
    # 1 x 0.01 on their sum; the page says what the rounds spent and plots accuracy by it.
    d = sim(tmp, "d", "fp32", ["--fraction", "0.5", "--dp", "gaussian(noise=1,clip=0.01)",
                               "--html", f"{tmp}/d.html"], clients=4)
    spent = [r["dp_epsilon"] for r in d["rounds"]]
    check(len(spent) == 4 and spent == sorted(spent) and spent[0] > 0,
          f"run d's rounds spend privacy: {spent}")
    p = parse(f"{tmp}/d.html")
    check(p.figures.get("plot-privacy") == 1, "the DP run's accuracy is plotted by epsilon")
    check(abs(value(p, "dp_epsilon") - spent[-1]) < 1e-9, "the DP run's summary says its epsilon")
    # The flags every fedlgc binary has: --version, --print-config read back by --config
    # (the same page), an unknown key refused.
    tool = f"{BIN}/fedlgc-report"
    version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
    check(re.fullmatch(r"fedlgc-report \d+\.\d+\.\d+\n", version) is not None,
          f"--version says the project's version: {version!r}")
    printed = subprocess.run([tool, "-o", f"{tmp}/cfg.html", "--title", "it's a title",
                              "--names", "x,y", "--print-config"], capture_output=True, text=True)
    with open(f"{tmp}/report.toml", "w") as f:
        f.write(printed.stdout)
    r = subprocess.run([tool, f"{tmp}/a.json", f"{tmp}/b.json", "--config", f"{tmp}/report.toml",
                        "--log-level", "warning"], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and r.stdout == "", f"--config runs the printed config quietly: {r}")
    with open(f"{tmp}/cfg.html") as f:
        page_text = f.read()
    check("<title>" + html.escape("it's a title") + "</title>" in page_text,
          "the page has the config's title")
    with open(f"{tmp}/bad.toml", "w") as f:
        f.write("output='x.html'\ncolour='red'\n")
    r = subprocess.run([tool, f"{tmp}/a.json", "--config", f"{tmp}/bad.toml"], capture_output=True,
                       text=True)
    check(r.returncode == 2 and "unknown key 'colour'" in r.stderr, "an unknown key is refused")
    bad = subprocess.run([f"{BIN}/fedlgc-report", f"{tmp}/a.run/coordinator.toml", "-o",
                          f"{tmp}/bad.html"], capture_output=True, text=True)
    check(bad.returncode != 0 and "fedlgc-report:" in bad.stderr and
          not os.path.exists(f"{tmp}/bad.html"), "a file that is not a report is refused")
    if failures:
        print(f"{len(failures)} checks failed; pages in {tmp}")
        sys.exit(1)
    shutil.rmtree(tmp)
    print("all checks passed")


main()
