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
6. The tree on a single-node swarm (joined for the test and left after, unless the engine
   was in a swarm already): docker/stack.yml for 4 edges and 2 aggregators, a root, a
   replicated aggregator service (agg-1, agg-2) and a replicated edge service (edge-1..4),
   identities by task slot and certificates from Docker secrets; every round is committed
   once at every tier with every edge's update.

  compose_engine_test.py BIN_DIR SOURCE_DIR
FEDLGC_COMPOSE_PHASES="swarm stack" (comma-separated phase names) runs only those phases.
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
TAG = "ci"  # FEDLGC_TAG: never the tag users' own deployments run
EDGES = ["edge-1", "edge-2", "edge-3"]
START = time.time()


def log(msg):
    print(f"[{time.time() - START:6.1f}s] {msg}", flush=True)


def fail(msg):
    raise SystemExit(f"FAIL: {msg}")


def run(args, env=None, check=True, timeout=900, **kw):
    """Runs a command; its stdout is what callers parse, its stderr only goes into errors."""
    r = subprocess.run(args, env=env, text=True, timeout=timeout, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, **kw)
    if check and r.returncode != 0:
        fail(f"{' '.join(args)} exited {r.returncode}:\n{(r.stdout + r.stderr)[-3000:]}")
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
        try:
            return subprocess.run(["docker", "info"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=30).returncode == 0
        except subprocess.TimeoutExpired:
            fail(f"the engine on {env.get('DOCKER_HOST', 'the default socket')} does not answer "
                 "within 30 s")

    def start(self):
        host = self.env.get("DOCKER_HOST", "")
        if host and not host.startswith("unix://"):
            # The deployment bind-mounts files from this host's /tmp and is reached on
            # 127.0.0.1: only an engine on this host will do.
            fail(f"DOCKER_HOST={host}: the test needs an engine on this host (unix://)")
        if self.answers(self.env):
            log(f"engine: using the running one ({host or 'default socket'})")
            return
        os.makedirs(self.cache, exist_ok=True)
        sock = os.path.join(self.cache, "sock")
        self.env["DOCKER_HOST"] = f"unix://{sock}"
        if self.answers(self.env):
            log(f"engine: using the running one on {sock} (left running)")
            return
        # A dockerd that does not answer here is someone else's: a second one beside it
        # would fight it over docker0 and the iptables chains.
        others = [pid for pid in os.listdir("/proc") if pid.isdigit() and
                  open(f"/proc/{pid}/comm").read().strip() == "dockerd"] if os.path.isdir("/proc") else []
        if others:
            fail(f"a dockerd runs (pid {', '.join(others)}) but does not answer on "
                 f"{host or 'the default socket'}: set DOCKER_HOST to its socket")
        pidfile = os.path.join(self.cache, "pid")
        if os.path.exists(pidfile):
            os.remove(pidfile)  # stale: its dockerd is gone (none runs, above)
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
            os.killpg(self.proc.pid, signal.SIGKILL)  # with its containerd
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
           check=False).returncode != 0 and \
            run(["docker", "pull", "-q", "prom/prometheus:v2.42.0"], env=env, check=False).returncode != 0:
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
        if out[0] != "10001" or out[1] != "0" or len(out) > 2:
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
        # The images' healthchecks, probed every 2 s instead of 15 s so that a short job
        # sees them turn healthy (the probe itself is the image's).
        with open(os.path.join(self.dir, "docker-compose.test.yml"), "w") as f:
            f.write("services:\n" + "".join(f"  {s}:\n    healthcheck:\n      interval: 2s\n"
                                            for s in ["coordinator"] + EDGES))
        self.env = dict(env, FEDLGC_TAG=TAG, FEDLGC_GRPC_PORT="", PROMETHEUS_PORT="",
                        FEDLGC_CODEC="qsgd(bits=4)", FEDLGC_MODEL="mlp", FEDLGC_LOCAL_STEPS="30",
                        FEDLGC_ROUND_TIMEOUT="120")
        self.files = []

    def compose(self, *args, check=True, **kw):
        return run(["docker-compose", "-p", PROJECT, *self.files, *args], env=self.env,
                   check=check, cwd=self.dir, **kw)

    def up(self, rounds, lossy=False):
        self.files = ["-f", "docker-compose.yml", "-f", "docker-compose.test.yml"] + (
            ["-f", "docker-compose.lossy.yml"] if lossy else [])
        self.env["FEDLGC_ROUNDS"] = str(rounds)
        self.compose("up", "-d", "--no-build", "coordinator", *EDGES, "prometheus")
        self.ids = {}
        port = self.compose("port", "prometheus", "9090").stdout.strip().rsplit(":", 1)[1]
        self.api = f"http://127.0.0.1:{port}/api/v1"

    def down(self):
        self.compose("down", "-v", "--remove-orphans", check=False)

    def container(self, service):
        if service not in self.ids:
            self.ids[service] = self.compose("ps", "-q", service).stdout.strip()
        return self.ids[service]

    def started_at(self, service):
        return run(["docker", "inspect", "-f", "{{.State.StartedAt}}", self.container(service)],
                   env=self.env).stdout.strip()

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
        # over a window: the coordinator exits 15 s after the job, and its series go stale
        r = self.query("max_over_time(fedlgc_job_finished[15m])")
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

    # Scraped: each target listed, each with a successful scrape (over a window: the
    # processes exit 15 s after the job).
    expected = sorted([("coordinator", "coordinator:9464")] + [("edge", f"{e}:9464") for e in EDGES])

    def all_scraped():
        up = dep.query("max_over_time(up[15m])") or []
        return sorted((x["metric"]["job"], x["metric"]["instance"]) for x in up
                      if x["value"][1] == "1") == expected

    wait_for("Prometheus to scrape all 4 targets up", all_scraped, 60)
    listed = sorted((t["labels"]["job"], t["labels"]["instance"]) for t in dep.targets())
    if listed != expected:
        fail(f"scrape targets: {listed}")
    log(f"prometheus scraped {len(listed)} targets: {', '.join(i for _, i in listed)}")
    wait_for("fedlgc_job_finished == 1", dep.job_finished, 600, every=2)
    check_round_numbers(dep.rounds(), rounds)

    def uplink_bytes():
        by_side = {}
        for side in ("coordinator", "edge"):
            expr = f'last_over_time(fedlgc_uplink_wire_bytes_total{{job="{side}"}}[15m])'
            for x in dep.query(expr) or []:
                by_side.setdefault(side, {})[x["metric"]["client"]] = float(x["value"][1])
        return by_side.get("coordinator", {}), by_side.get("edge", {})

    def equal():
        c, e = uplink_bytes()
        return sorted(c) == EDGES and c == e and (c, e)

    # Both sides linger 15 s after the job, a few scrapes of their final counters.
    try:
        coord, edge = wait_for("equal uplink bytes on both sides", equal, 20)
    except SystemExit:
        coord, edge = uplink_bytes()
        fail(f"uplink bytes per client: coordinator {coord}, clients {edge}")
    if min(coord.values()) <= 0:
        fail(f"uplink bytes per client: coordinator {coord}, clients {edge}")
    log("uplink bytes per client, coordinator = client: " +
        ", ".join(f"{c} {int(v)}" for c, v in sorted(coord.items())))
    log(f"clean job: {rounds} rounds committed, fedlgc_job_finished 1")


def killed_coordinator(dep, rounds):
    dep.up(rounds)
    before = wait_for("2 committed rounds", lambda: len(dep.rounds()) >= 2 and dep.rounds(), 300)
    started = dep.started_at("coordinator")
    run(["docker", "kill", dep.container("coordinator")], env=dep.env)
    kept = dep.rounds()
    if kept[:len(before)] != before:
        fail("rounds committed before the kill changed")
    if len(kept) >= rounds:
        fail(f"the job had ended ({len(kept)} rounds) before the kill: nothing was restarted")
    log(f"docker kill coordinator after {len(kept)} committed rounds")
    dep.compose("start", "coordinator")
    wait_for("the coordinator to run again", lambda: dep.started_at("coordinator") != started, 60)
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


STACK = "fedlgc-ci-stack"
STACK_EDGES, STACK_AGGREGATORS = 4, 2


def swarm_stack(dep, rounds):
    """The tree on a single-node swarm (docker/gen-stack.sh 4 2, docker stack deploy): a root,
    a replicated aggregator service whose replicas are agg-1 and agg-2 and a replicated edge
    service whose replicas are edge-1..4, by task slot, with certificates from Docker
    secrets. The job finishes with every round committed once at every tier: the root takes
    one update from each aggregator, each aggregator one from each of its two edges, and
    the four edges are all there; every task ends complete."""
    run([os.path.join(dep.dir, "gen-stack.sh"), str(STACK_EDGES), str(STACK_AGGREGATORS)])
    env = dict(dep.env, FEDLGC_ROUNDS=str(rounds))
    state = run(["docker", "info", "-f", "{{.Swarm.LocalNodeState}}"], env=env).stdout.strip()
    joined = state != "active"
    if joined:
        run(["docker", "swarm", "init", "--advertise-addr", "127.0.0.1"], env=env)

    def tasks(service):
        r = run(["docker", "service", "ps", "--no-trunc", "--format",
                 "{{.Name}}|{{.CurrentState}}|{{.Error}}", f"{STACK}_{service}"], env=env,
                check=False)
        return [line.split("|") for line in r.stdout.splitlines()]

    def complete(service, n):
        done = [t for t in tasks(service) if t[1].startswith("Complete")]
        failed = [t for t in tasks(service) if t[1].startswith(("Failed", "Rejected"))]
        if failed:
            fail(f"{service} tasks failed: {failed}")
        return len(done) >= n and done

    def volume_lines(volume, path):
        """A file in one of the stack's volumes, read through a container of its own."""
        r = run(["docker", "run", "--rm", "-v", f"{STACK}_{volume}:/s:ro", "--entrypoint", "cat",
                 f"fedlgc/coordinator:{TAG}", f"/s/{path}"], env=env, check=False)
        if r.returncode != 0:
            fail(f"{volume}:{path}: {r.stderr.strip()}")
        return r.stdout.splitlines()

    def updates_by_round(lines):
        check_round_numbers(lines, rounds)
        return [sorted(json.loads(line).get("update_norm", {})) for line in lines]

    volumes = ("coordinator-state", "aggregator-state", "edge-state")
    try:
        run(["docker", "stack", "deploy", "-c", "stack.yml", STACK], env=env, cwd=dep.dir)
        wait_for("the stack's root to finish its job", lambda: complete("coordinator", 1), 600,
                 every=3)
        aggs = wait_for("every aggregator replica to finish",
                        lambda: complete("aggregator", STACK_AGGREGATORS), 120, every=3)
        edges = wait_for("every edge replica to finish", lambda: complete("edge", STACK_EDGES),
                         120, every=3)
        aggregators = [f"agg-{a}" for a in range(1, STACK_AGGREGATORS + 1)]
        for r, clients in enumerate(updates_by_round(volume_lines("coordinator-state",
                                                                  "rounds.jsonl"))):
            if clients != aggregators:
                fail(f"root round {r + 1}: updates from {clients}, not {aggregators}")
        under = {}
        for a in aggregators:
            per_round = updates_by_round(volume_lines("aggregator-state", f"{a}/rounds.jsonl"))
            if any(clients != per_round[0] or len(clients) != STACK_EDGES // STACK_AGGREGATORS
                   for clients in per_round):
                fail(f"{a}: updates by round {per_round}")
            under[a] = per_round[0]
        everyone = sorted(e for clients in under.values() for e in clients)
        if everyone != sorted(f"edge-{i}" for i in range(1, STACK_EDGES + 1)):
            fail(f"the aggregators' edges: {under}")
        took = "; ".join(f"{a} took {', '.join(c)}" for a, c in under.items())
        log(f"swarm stack: {rounds} rounds; the root took {', '.join(aggregators)} each round; "
            f"{took}; {len(aggs)} aggregator and {len(edges)} edge tasks complete")
    except BaseException:
        for service in ("coordinator", "aggregator", "edge"):
            print(run(["docker", "service", "logs", "--tail", "30", f"{STACK}_{service}"],
                      env=env, check=False).stdout)
        raise
    finally:
        run(["docker", "stack", "rm", STACK], env=env, check=False)
        wait_for("the stack's containers to go", lambda: not run(
            ["docker", "ps", "-aq", "--filter", f"label=com.docker.stack.namespace={STACK}"],
            env=env, check=False).stdout.strip(), 120, every=2)
        for volume in volumes:
            run(["docker", "volume", "rm", f"{STACK}_{volume}"], env=env, check=False)
        if joined:
            run(["docker", "swarm", "leave", "--force"], env=env, check=False)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    bin_dir, src = (os.path.abspath(a) for a in sys.argv[1:])
    missing = [t for t in ("dockerd", "docker", "docker-compose", "debootstrap") if not shutil.which(t)]
    if os.geteuid() != 0 or missing:
        print(f"SKIP: needs root and {missing or 'is not root'} (scripts/setup.sh installs them)")
        return 77
    release = open("/etc/os-release").read() if os.path.exists("/etc/os-release") else ""
    if "ID=debian" not in release or 'VERSION_ID="12"' not in release:
        print("SKIP: the images and the host-built binaries they carry need a Debian 12 host")
        return 77
    # SIGTERM or SIGHUP (a CI timeout) still takes the deployment down and stops our dockerd.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _: sys.exit(128 + signum))
    engine = Engine(os.environ.get("FEDLGC_DOCKER_CACHE", "/var/cache/fedlgc-docker"))
    tmp = tempfile.mkdtemp(prefix="fedlgc-compose-")
    try:
        engine.start()
        build_images(src, bin_dir, engine.cache, engine.env)
        dep = Deployment(src, engine.env, tmp)
        dep.down()  # what an interrupted earlier run left
        phases = [("clean job", clean_job, 12), ("killed coordinator", killed_coordinator, 10),
                  ("lossy links", lossy_job, 3), ("swarm stack", swarm_stack, 3)]
        only = os.environ.get("FEDLGC_COMPOSE_PHASES")  # e.g. "swarm stack" (for development)
        for name, phase, rounds in phases:
            if only and name not in only.split(","):
                continue
            t = time.time()
            try:
                phase(dep, rounds)
            except BaseException:
                print(dep.logs())
                raise
            finally:
                dep.down()
            log(f"{name}: {time.time() - t:.0f}s")
        log("PASS: the compose deployment on a real engine")
        return 0
    finally:  # (each phase took its deployment down itself)
        if engine.proc is None:  # someone else's engine: leave no test images in it
            run(["docker", "image", "rm", f"fedlgc/coordinator:{TAG}", f"fedlgc/edge:{TAG}"],
                env=engine.env, check=False)
        engine.stop()
        for d in ("bin", "lib"):  # the staged binaries and libraries, ~500 MB
            shutil.rmtree(os.path.join(src, "docker/prebuilt", d), ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
