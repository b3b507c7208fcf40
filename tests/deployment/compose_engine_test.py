#!/usr/bin/env python3
"""docker/docker-compose.yml on a real Docker engine: the deployment users run, run.

1. The engine: the one DOCKER_HOST (or the default socket) answers on, left running; when
   none answers, a dockerd of the test's own (vfs storage, data root, exec root and socket
   under FEDLGC_DOCKER_CACHE, default /var/cache/fedlgc-docker), stopped at the end by its
   pid. Images stay in that data root, so later runs rebuild only what changed.
2. The images: debian:12 and debian:12-slim when missing (docker/base-images.sh, with
   debootstrap from the host's mirror); fedlgc/coordinator and fedlgc/edge from
   docker/Dockerfile with the binaries of BIN_DIR (BINARIES=prebuilt, BuildKit);
   prom/prometheus:v2.42.0 from Debian's package (Dockerfile.prometheus here), since no
   registry can be reached. Grafana's image cannot be had: docker/check.sh checks its
   provisioning statically and Grafana is not started.
   Checked: sizes (printed), non-root users, no compiler, every library resolves.
3. A clean job (coordinator, edge-1..3, Prometheus; certificates from docker/gen-edges.sh,
   in a copy of docker/): every container's healthcheck turns healthy, Prometheus scraped
   all four targets, each client's uplink bytes as the coordinator counted them equal the
   client's own count, fedlgc_job_finished is 1, every round committed once.
4. `docker kill` of the coordinator mid-job, then `docker-compose start`: the job completes,
   the rounds committed before the kill are kept as they were (the state volume), none is
   committed twice or lost.
5. docker-compose.lossy.yml (tbf rate cap and nftables drop in each client): the job
   completes.

  compose_engine_test.py BIN_DIR SOURCE_DIR
Exit 77 (skip) when not root or when dockerd, docker, docker-compose or debootstrap is
missing (scripts/setup.sh installs them).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

PROJECT = "fedlgc-ci"
TAG = "0.1.0"
EDGES = ["edge-1", "edge-2", "edge-3"]
START = time.time()


def log(msg):
    print(f"[{time.time() - START:6.1f}s] {msg}", flush=True)


def fail(msg):
    raise SystemExit(f"FAIL: {msg}")


def run(args, env=None, check=True, capture=True, timeout=900, **kw):
    r = subprocess.run(args, env=env, text=True, timeout=timeout,
                       stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.STDOUT if capture else None, **kw)
    if check and r.returncode != 0:
        fail(f"{' '.join(args)} exited {r.returncode}:\n{(r.stdout or '')[-3000:]}")
    return r


def wait_for(what, predicate, timeout, every=1.0):
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    fail(f"timed out after {timeout}s waiting for {what}")


class Engine:
    """A Docker engine to talk to; starts (and later stops) its own only when none answers."""

    def __init__(self, cache):
        self.cache = cache
        self.proc = None
        self.env = dict(os.environ)

    def answers(self, env):
        return subprocess.run(["docker", "info"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=30).returncode == 0

    def start(self):
        if self.answers(self.env):
            log(f"engine: using the running one ({self.env.get('DOCKER_HOST', 'default socket')})")
            return
        os.makedirs(self.cache, exist_ok=True)
        sock = os.path.join(self.cache, "sock")
        self.env["DOCKER_HOST"] = f"unix://{sock}"
        if self.answers(self.env):
            log(f"engine: using the running one on {sock}")
            return
        self.proc = subprocess.Popen(
            ["dockerd", "--storage-driver=vfs", f"--data-root={self.cache}/data",
             f"--exec-root={self.cache}/exec", f"--pidfile={self.cache}/pid", f"-H=unix://{sock}"],
            stdout=open(os.path.join(self.cache, "dockerd.log"), "w"), stderr=subprocess.STDOUT,
            start_new_session=True)
        wait_for("dockerd to answer", lambda: self.proc.poll() is None and self.answers(self.env)
                 or self.proc.poll() is not None and fail("dockerd exited (see its log in "
                                                          f"{self.cache}/dockerd.log)"), 90)
        log(f"engine: started dockerd {self.proc.pid} (data root {self.cache}/data)")

    def stop(self):
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        log("engine: stopped the dockerd this test started")


def buildkit_client(env):
    """A docker client that builds with BuildKit: with buildx, or a version before 23 (which
    has BuildKit built in). BuildKit builds only the stages a target needs, so the
    prebuilt images never run the compile stage."""
    for client in dict.fromkeys([shutil.which("docker"), "/usr/bin/docker"]):
        if not client or not os.path.exists(client):
            continue
        if run([client, "buildx", "version"], env=env, check=False).returncode == 0:
            return client
        version = run([client, "version", "--format", "{{.Client.Version}}"], env=env,
                      check=False).stdout.strip()
        if version and version.split(".")[0].isdigit() and int(version.split(".")[0]) < 23:
            return client
    fail("no docker client with BuildKit (docker buildx, or a client before 23.0)")


def build_images(src, bin_dir, cache, env):
    run([os.path.join(src, "docker/base-images.sh"), os.path.join(cache, "rootfs")], env=env)
    run([os.path.join(src, "docker/stage-prebuilt.sh"), bin_dir])
    client = buildkit_client(env)
    benv = dict(env, DOCKER_BUILDKIT="1")
    for target in ("coordinator", "edge"):
        t = time.time()
        run([client, "build", "-q", "-f", os.path.join(src, "docker/Dockerfile"),
             "--build-arg", "BINARIES=prebuilt", "--target", target,
             "-t", f"fedlgc/{target}:{TAG}", src], env=benv)
        log(f"image fedlgc/{target}:{TAG} built in {time.time() - t:.0f}s")
    if run(["docker", "image", "inspect", "prom/prometheus:v2.42.0"], env=env,
           check=False).returncode != 0:
        here = os.path.dirname(os.path.abspath(__file__))
        run([client, "build", "-q", "-f", os.path.join(here, "Dockerfile.prometheus"),
             "-t", "prom/prometheus:v2.42.0", here], env=benv)
    for image in (f"fedlgc/coordinator:{TAG}", f"fedlgc/edge:{TAG}", "prom/prometheus:v2.42.0"):
        size = int(run(["docker", "image", "inspect", "-f", "{{.Size}}", image], env=env).stdout)
        log(f"image {image}: {size / 1e6:.0f} MB")
    for target, binary in (("coordinator", "fedlgc-coordinator"), ("edge", "fedlgc-edge")):
        out = run(["docker", "run", "--rm", "--entrypoint", "sh", f"fedlgc/{target}:{TAG}", "-c",
                   f"id -u; ldd /usr/local/bin/{binary} | grep -c 'not found' || true; "
                   "for c in cc gcc g++ c++ clang ld; do command -v $c; done; true"],
                  env=env).stdout.split()
        if out[0] == "0" or out[1] != "0" or len(out) > 2:
            fail(f"fedlgc/{target}: uid {out[0]}, {out[1]} missing libraries, tools {out[2:]}")
    log("images: non-root, no compiler or linker, every library resolves")


class Deployment:
    """docker-compose on a copy of docker/, as project fedlgc-ci."""

    def __init__(self, src, env, tmp):
        self.dir = os.path.join(tmp, "docker")
        shutil.copytree(os.path.join(src, "docker"), self.dir,
                        ignore=shutil.ignore_patterns("prebuilt", "certs", ".env",
                                                      "docker-compose.edges.yml"))
        os.makedirs(os.path.join(tmp, "scripts"))
        shutil.copy(os.path.join(src, "scripts/gen-certs.sh"), os.path.join(tmp, "scripts"))
        run([os.path.join(self.dir, "gen-edges.sh"), "3"])
        self.env = dict(env, FEDLGC_GRPC_PORT="", PROMETHEUS_PORT="",
                        FEDLGC_CODEC="qsgd(bits=4)", FEDLGC_MODEL="mlp", FEDLGC_LOCAL_STEPS="30",
                        FEDLGC_ROUND_TIMEOUT="120")
        self.files = ["-f", "docker-compose.yml"]

    def compose(self, *args, check=True, **kw):
        return run(["docker-compose", "-p", PROJECT, *self.files, *args], env=self.env,
                   check=check, cwd=self.dir, **kw)

    def up(self, rounds, lossy=False):
        self.files = ["-f", "docker-compose.yml"] + (["-f", "docker-compose.lossy.yml"] if lossy else [])
        self.env["FEDLGC_ROUNDS"] = str(rounds)
        self.compose("up", "-d", "--no-build", "coordinator", *EDGES, "prometheus")
        port = self.compose("port", "prometheus", "9090").stdout.strip().rsplit(":", 1)[1]
        self.api = f"http://127.0.0.1:{port}/api/v1"

    def down(self):
        self.compose("down", "-v", "--remove-orphans", check=False)

    def container(self, service):
        return self.compose("ps", "-q", service).stdout.strip()

    def query(self, expr):
        url = f"{self.api}/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except Exception:  # Prometheus not listening yet
            return None
        return body["data"]["result"] if body.get("status") == "success" else None

    def targets(self):
        with urllib.request.urlopen(f"{self.api}/targets", timeout=10) as r:
            return json.load(r)["data"]["activeTargets"]

    def job_finished(self):
        r = self.query("fedlgc_job_finished")
        return bool(r) and float(r[0]["value"][1]) == 1

    def rounds(self):
        """The coordinator's committed rounds (rounds.jsonl in its state volume), read
        through its container, running or not."""
        path = os.path.join(self.dir, "rounds.jsonl")
        if os.path.exists(path):
            os.remove(path)
        r = run(["docker", "cp", f"{self.container('coordinator')}:/var/lib/fedlgc/rounds.jsonl",
                 path], env=self.env, check=False)
        return open(path).read().splitlines() if r.returncode == 0 else []

    def logs(self):
        return self.compose("logs", "--no-color", "--tail=40", check=False).stdout


def check_round_numbers(lines, rounds):
    numbers = [json.loads(line)["round"] for line in lines]
    if numbers != list(range(1, rounds + 1)):
        fail(f"committed rounds {numbers}, not 1..{rounds} once each")


def clean_job(dep, rounds):
    """Health, scrape targets, per-client bytes on both sides, the job's end."""
    dep.up(rounds)

    def healthy():
        states = {}
        for service in ["coordinator"] + EDGES:
            states[service] = run(["docker", "inspect", "-f", "{{.State.Health.Status}}",
                                   dep.container(service)], env=dep.env, check=False).stdout.strip()
        return all(v == "healthy" for v in states.values()) and states

    log(f"healthchecks: {wait_for('every fedlgc container healthy', healthy, 120)}")

    def all_up():
        t = dep.query("up")
        return t is not None and len(t) == 4 and all(x["value"][1] == "1" for x in t)

    wait_for("Prometheus to scrape all 4 targets up", all_up, 60)
    scraped = sorted((t["labels"]["job"], t["labels"]["instance"], t["health"]) for t in dep.targets())
    if scraped != sorted([("coordinator", "coordinator:9464", "up")] +
                         [("edge", f"{e}:9464", "up") for e in EDGES]):
        fail(f"scrape targets: {scraped}")
    log(f"prometheus scraped {len(scraped)} targets, all up")
    wait_for("fedlgc_job_finished == 1", dep.job_finished, 600, every=2)
    check_round_numbers(dep.rounds(), rounds)
    # The coordinator lingers a few scrapes after the job: its counters and the clients'
    # are final by now.
    time.sleep(6)
    by_side = {}
    for side in ("coordinator", "edge"):
        for s in dep.query(f'last_over_time(fedlgc_uplink_wire_bytes_total{{job="{side}"}}[5m])') or []:
            by_side.setdefault(side, {})[s["metric"]["client"]] = float(s["value"][1])
    coord, edge = by_side.get("coordinator", {}), by_side.get("edge", {})
    if sorted(coord) != EDGES or coord != edge or min(coord.values()) <= 0:
        fail(f"uplink bytes per client: coordinator {coord}, clients {edge}")
    log("uplink bytes per client, coordinator = client: " +
        ", ".join(f"{c} {int(v)}" for c, v in sorted(coord.items())))
    log(f"clean job: {rounds} rounds committed, fedlgc_job_finished 1")


def killed_coordinator(dep, rounds):
    dep.up(rounds)
    before = wait_for("2 committed rounds", lambda: len(dep.rounds()) >= 2 and dep.rounds(), 300)
    cid = dep.container("coordinator")
    run(["docker", "kill", cid], env=dep.env)
    kept = dep.rounds()
    if kept[:len(before)] != before:
        fail("rounds committed before the kill changed")
    log(f"docker kill coordinator after {len(kept)} committed rounds")
    dep.compose("start", "coordinator")
    if dep.container("coordinator") != cid:
        fail("the coordinator came back as another container (its state volume?)")
    wait_for("the job to finish after the restart", dep.job_finished, 600, every=2)
    after = dep.rounds()
    if after[:len(kept)] != kept:
        fail("a round committed before the kill was lost or rewritten")
    check_round_numbers(after, rounds)
    log(f"restarted coordinator finished the job: {len(kept)} rounds kept, {rounds} in all")


def lossy_job(dep, rounds):
    dep.env.update(LINK_RATE="10mbit", LINK_LOSS="2")
    dep.up(rounds, lossy=True)
    wait_for("the lossy job to finish", dep.job_finished, 600, every=2)
    check_round_numbers(dep.rounds(), rounds)
    logs = dep.compose("logs", "--no-color", *EDGES).stdout
    links = logs.count("lossy-link: eth0 rate=10mbit loss=2%")
    if links < len(EDGES):
        fail(f"{links} clients set up their lossy link:\n{logs[-2000:]}")
    log(f"lossy links (tbf 10mbit, 2% drop): {rounds} rounds committed")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    bin_dir, src = (os.path.abspath(a) for a in sys.argv[1:])
    missing = [t for t in ("dockerd", "docker", "docker-compose", "debootstrap") if not shutil.which(t)]
    if os.geteuid() != 0 or missing:
        print(f"SKIP: needs root and {missing or 'is not root'} (scripts/setup.sh installs them)")
        return 77
    engine = Engine(os.environ.get("FEDLGC_DOCKER_CACHE", "/var/cache/fedlgc-docker"))
    tmp = tempfile.mkdtemp(prefix="fedlgc-compose-")
    dep = None
    try:
        engine.start()
        build_images(src, bin_dir, engine.cache, engine.env)
        dep = Deployment(src, engine.env, tmp)
        dep.down()  # what an interrupted earlier run left
        phases = [("clean job", clean_job, 8), ("killed coordinator", killed_coordinator, 6),
                  ("lossy links", lossy_job, 3)]
        for name, phase, rounds in phases:
            t = time.time()
            try:
                phase(dep, rounds)
            except SystemExit:
                print(dep.logs())
                raise
            finally:
                dep.down()
            log(f"{name}: {time.time() - t:.0f}s")
        log("PASS: the compose deployment on a real engine")
        return 0
    finally:
        if dep is not None:
            dep.down()
        engine.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
