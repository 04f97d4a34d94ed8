"""The embedded environment's "does it answer" probes (localenv/probes.py): a raising check is a no,
a port is taken only while something listens, ZooKeeper answers `ruok` with `imok`. Local sockets only."""

from __future__ import annotations

import socket
import threading

from sparkscale.localenv.probes import answered, port_open, zookeeper_ruok


def listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_check_that_raises_is_a_no() -> None:
    def refused() -> bool:
        raise ConnectionRefusedError

    assert answered(lambda: True) and not answered(lambda: False) and not answered(refused)


def test_a_port_is_open_only_while_something_listens() -> None:
    sock = listener()
    port = sock.getsockname()[1]
    assert port_open("127.0.0.1", port)
    sock.close()
    assert not port_open("127.0.0.1", port)


def test_zookeeper_answers_ruok_on_the_host_and_port_asked() -> None:
    sock = listener()

    def serve(reply: bytes) -> None:
        conn, _ = sock.accept()
        with conn:
            assert conn.recv(4) == b"ruok"
            conn.sendall(reply)

    for reply, ok in ((b"imok", True), (b"no", False)):
        server = threading.Thread(target=serve, args=(reply,))
        server.start()
        assert zookeeper_ruok("127.0.0.1", sock.getsockname()[1]) is ok
        server.join(timeout=5)
    sock.close()
