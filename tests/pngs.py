"""What a PNG shows, read with the standard library alone: its pixels' colours, to tell a drawn chart from a
blank one in a browser's screenshot (8-bit RGB or RGBA, not interlaced: what Chromium writes)."""
import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def colours(png: bytes) -> set:
    """The (r, g, b) colours of every pixel."""
    assert png.startswith(SIGNATURE), "not a PNG"
    chunks, offset = {}, len(SIGNATURE)
    while offset < len(png):
        length, kind = struct.unpack(">I4s", png[offset:offset + 8])
        chunks.setdefault(kind, []).append(png[offset + 8:offset + 8 + length])
        offset += length + 12
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"][0])
    assert depth == 8 and colour_type in (2, 6) and not interlace, (depth, colour_type, interlace)
    channels = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(b"".join(chunks[b"IDAT"])), width * channels
    previous, found = bytearray(stride), set()
    for row in range(height):
        start = row * (stride + 1)
        line = _unfiltered(raw[start], bytearray(raw[start + 1:start + 1 + stride]), previous, channels)
        found.update(tuple(line[i:i + 3]) for i in range(0, stride, channels))
        previous = line
    return found


def _unfiltered(kind: int, line: bytearray, above: bytearray, channels: int) -> bytearray:
    for i in range(len(line)):
        left = line[i - channels] if i >= channels else 0
        up, corner = above[i], above[i - channels] if i >= channels else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 2:
            line[i] = (line[i] + up) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            guess = left + up - corner
            nearest = min((abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner))
            line[i] = (line[i] + nearest[2]) & 0xFF
    return line
