"""A TCP relay in front of a server, for the tests that lose an answer on its way back.

    with Relay(3306) as relay:                  # 127.0.0.1:relay.port passes everything through, both ways
        relay.lose_answer_to(b"COMMIT")         # the next client packet holding COMMIT reaches the server;
                                                # its answer does not reach the client, whose connection is cut
        relay.cuts                              # how many answers were lost so
"""
import socket
import threading


class Relay:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cuts = 0
        self._marker = None
        self._lock = threading.Lock()
        self._closing = False

    def __enter__(self):
        threading.Thread(target=self._accept, name="relay", daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        self._closing = True
        self.listener.close()

    def lose_answer_to(self, marker: bytes) -> None:
        with self._lock:
            self._marker = marker

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            doomed = threading.Event()          # the server's next answer on this pair is lost
            threading.Thread(target=self._up, args=(client, server, doomed), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, doomed), daemon=True).start()

    def _up(self, client, server, doomed) -> None:
        while data := _recv(client):
            with self._lock:
                if self._marker is not None and self._marker in data:
                    self._marker = None
                    doomed.set()
            server.sendall(data)
        _cut(server)

    def _down(self, server, client, doomed) -> None:
        while data := _recv(server):
            if doomed.is_set():
                with self._lock:
                    self.cuts += 1
                _cut(client)            # the answer never arrives: the connection ends instead
                _cut(server)
                return
            client.sendall(data)
        _cut(client)


def _recv(sock) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _cut(sock) -> None:
    """End the connection now, even under the other direction's blocked recv (a close alone would wait for it)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    _close(sock)


def _close(sock) -> None:
    try:
        sock.close()
    except OSError:
        pass
