"""An HTTPS server on Python's ssl module (OpenSSL), for the kernel tests' protocol matrix.

    tls_server.py --dir DIR --tls 1.2|1.3 --first-byte-ms N [--slow-ms N] [--stream-ms N]

Serves HTTP/1.1 (keep-alive) on a loopback port, printed as "listening PORT". Each answer's
first byte comes after first-byte-ms (slow-ms after SIGUSR1, first-byte-ms again after
SIGUSR2); with --stream-ms it then streams a chunk every 500 ms for that long. OpenSSL, as
configured here by default, sends two session tickets after the client's Finished on TLS 1.3.
"""

import argparse
import http.server
import signal
import ssl
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--dir", required=True)
parser.add_argument("--tls", choices=["1.2", "1.3"], default="1.3")
parser.add_argument("--first-byte-ms", type=int, default=0)
parser.add_argument("--slow-ms", type=int, default=0)
parser.add_argument("--stream-ms", type=int, default=0)
args = parser.parse_args()

delay_ms = args.first_byte_ms


def slow_down(*_):
    global delay_ms
    delay_ms = args.slow_ms


def speed_up(*_):
    global delay_ms
    delay_ms = args.first_byte_ms


signal.signal(signal.SIGUSR1, slow_down)
signal.signal(signal.SIGUSR2, speed_up)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        # The handshake in this connection's own thread: done by accept() it would serialise
        # every handshake in the one accepting thread, and a burst of connects would queue.
        self.request.do_handshake()
        super().setup()

    def do_GET(self):
        time.sleep(delay_ms / 1000)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.chunk(b"first\n")
        end = time.monotonic() + args.stream_ms / 1000
        while time.monotonic() < end:
            time.sleep(0.5)
            self.chunk(b"more\n")
        self.wfile.write(b"0\r\n\r\n")

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def log_message(self, *_):
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # A burst of connects waits in the kernel's accept queue, not in SYN retransmissions.
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        pass  # a client the test killed, or one the limiter refused: nothing to report


context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(f"{args.dir}/cert.pem", f"{args.dir}/key.pem")
version = ssl.TLSVersion.TLSv1_2 if args.tls == "1.2" else ssl.TLSVersion.TLSv1_3
context.minimum_version = context.maximum_version = version
server = Server(("127.0.0.1", 0), Handler)
server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
print(f"listening {server.server_address[1]}", flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    sys.exit(0)
