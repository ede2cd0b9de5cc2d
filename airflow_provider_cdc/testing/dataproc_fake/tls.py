"""What lets Google's clients reach the fake unchanged: a certificate for ``*.googleapis.com`` and an
HTTP ``CONNECT`` proxy.

The google provider's ``DataprocHook`` builds its clients itself: gRPC over TLS to
``{region}-dataproc.googleapis.com:443`` (``dataproc.googleapis.com:443`` for ``global``), with no way
to name another endpoint. gRPC honours two environment variables that reach it where it stands:
``grpc_proxy`` (an HTTP proxy every channel is opened through with ``CONNECT host:443``) and
``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` (the root certificates it trusts, read once per process). The
proxy here accepts ``CONNECT`` for Dataproc's hosts only (others are answered ``403``) and joins the
tunnel to the fake's TLS port, which presents a certificate for those hosts signed by itself.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import socketserver
import threading
from pathlib import Path

#: The hosts the proxy tunnels to the fake (what ``DataprocHook`` connects to).
DATAPROC_HOST_SUFFIX = "dataproc.googleapis.com"


def certificate(directory: str | Path) -> tuple[Path, bytes, bytes]:
    """The fake's certificate in ``directory``, made there the first time: self-signed for
    ``*.googleapis.com`` (its own root). Returns the certificate file's path (for
    ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``), the private key and the certificate, both PEM. A process
    that sets the variable before its first TLS channel (gRPC reads it once) can then reach any fake
    started with the same directory."""
    path, key_path = Path(directory) / "dataproc-fake-roots.pem", Path(directory) / "dataproc-fake-key.pem"
    if path.exists() and key_path.exists():
        return path, key_path.read_bytes(), path.read_bytes()
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Dataproc fake")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("*.googleapis.com"),
                    x509.DNSName(DATAPROC_HOST_SUFFIX),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
    key_path.write_bytes(key_pem)
    key_path.chmod(0o600)
    path.write_bytes(cert_pem)
    return path, key_pem, cert_pem


def is_dataproc_host(authority: str) -> bool:
    """Whether ``host:port`` of a ``CONNECT`` is one of Dataproc's endpoints on port 443."""
    host, _, port = authority.rpartition(":")
    host = host.lower()
    return port == "443" and (host == DATAPROC_HOST_SUFFIX or host.endswith("-" + DATAPROC_HOST_SUFFIX))


class _Tunnel(socketserver.BaseRequestHandler):
    server: ConnectProxy

    def handle(self) -> None:
        client: socket.socket = self.request
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk:
                return
            head += chunk
            if len(head) > 16384:
                client.sendall(b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n")
                return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, _, rest = request_line.partition(" ")
        authority = rest.split(" ", 1)[0]
        if method != "CONNECT" or not is_dataproc_host(authority):
            self.server.refused.append(request_line)
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        self.server.tunnelled.append(authority)
        upstream = socket.create_connection(("127.0.0.1", self.server.target_port))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        rest_of_head = head.split(b"\r\n\r\n", 1)[1]
        if rest_of_head:
            upstream.sendall(rest_of_head)
        pump = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
        pump.start()
        _pipe(client, upstream)
        pump.join(timeout=5)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (sink, source):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class ConnectProxy(socketserver.ThreadingTCPServer):
    """An HTTP ``CONNECT`` proxy on loopback that tunnels Dataproc's hosts to ``target_port``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, target_port: int, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _Tunnel)
        self.target_port = target_port
        #: the ``host:port`` of every tunnel opened, and the request lines refused
        self.tunnelled: list[str] = []
        self.refused: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, name="dataproc-fake-proxy", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> ConnectProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
