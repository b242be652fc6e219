"""The demo's bundled site: a small bookshop served on loopback.

Every book has a page with its title, author and price. Two pages show what batchd does
with trouble: one book is out of print (404: its task fails at once, with the reason in
the log), one page answers 503 once before it answers (retried, then done). One page is
in GBK without a charset in its header (decoded from its <meta charset>).

    python -m batchd.cli.demo.site      # prints "port N", serves until killed
"""
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

BOOKS = [(n, f"Book {n:02d}", f"Author {chr(65 + n % 26)}", f"{5 + (n * 37) % 40}.{n % 10}9") for n in range(1, 49)]
CHINESE_BOOK = (49, "西游记", "吴承恩", "18.00")
OUT_OF_PRINT = 50
FLAKY = 7


def book_paths() -> list:
    return [f"/books/{n}" for n in range(1, OUT_OF_PRINT + 1)]


def book_page(number: int) -> tuple:
    """(status, content type, body) of a book page."""
    if number == OUT_OF_PRINT:
        return 404, "text/html; charset=utf-8", b"<h1>Out of print</h1>"
    if number == CHINESE_BOOK[0]:
        _, title, author, price = CHINESE_BOOK
        html = (f'<html><head><meta charset="gbk"><title>{title}</title></head><body>'
                f'<h1 class="title">{title}</h1><p class="author">{author}</p>'
                f'<p class="price">{price}</p></body></html>')
        return 200, "text/html", html.encode("gbk")
    _, title, author, price = BOOKS[number - 1]
    html = (f"<html><head><title>{title}</title></head><body><h1 class=\"title\">{title}</h1>"
            f"<p class=\"author\">{author}</p><p class=\"price\">{price}</p></body></html>")
    return 200, "text/html; charset=utf-8", html.encode("utf-8")


class BookshopHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    flaky_hits = 0
    lock = threading.Lock()

    def do_GET(self):
        number = self._book_number()
        if number is None:
            return self._answer(404, "text/plain", b"no such page")
        if number == FLAKY and self._first_flaky_hit():
            return self._answer(503, "text/plain", b"busy, try again", {"Retry-After": "0"})
        self._answer(*book_page(number))

    def _book_number(self):
        parts = self.path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "books" and parts[1].isdigit() and 1 <= int(parts[1]) <= OUT_OF_PRINT:
            return int(parts[1])
        return None

    def _first_flaky_hit(self) -> bool:
        with BookshopHandler.lock:
            BookshopHandler.flaky_hits += 1
            return BookshopHandler.flaky_hits == 1

    def _answer(self, status: int, content_type: str, body: bytes, headers: Optional[dict] = None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass     # the demo's terminal shows batchd, not the site


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BookshopHandler)
    server.daemon_threads = True
    print(f"port {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
