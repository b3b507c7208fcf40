"""Ports for the tests' processes, shared by tests/python and tests/deployment."""

import random
import socket


def free_port():
    """A free port on 127.0.0.1 below the kernel's ephemeral range: bind(0) and the
    outgoing connections of every other test take theirs from that range, so a port
    picked here is not handed to another process between this call and its use."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")
