"""A TCP proxy on 127.0.0.1 that slows what a client sends to `bytes_per_second` (a slow
uplink), for tests that must catch an upload in the middle. Threads, no asyncio."""

import socket
import threading
import time


class Throttle:
    def __init__(self, target_port, bytes_per_second):
        self.target_port = target_port
        self.rate = bytes_per_second
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            self.conns += [client, server]
            threading.Thread(target=self._pump, args=(client, server, self.rate),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, 0), daemon=True).start()

    @staticmethod
    def _pump(src, dst, rate):
        # Each chunk leaves len/rate after the one before, or at once when the link has
        # been idle: idle time earns no credit (a client that waited for its round would
        # otherwise send its whole update in one burst).
        next_free = time.monotonic()
        try:
            while True:
                data = src.recv(4096)
                if not data:
                    break
                if rate:
                    now = time.monotonic()
                    next_free = max(next_free, now) + len(data) / rate
                    time.sleep(next_free - now)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self):
        self.stopped = True
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
