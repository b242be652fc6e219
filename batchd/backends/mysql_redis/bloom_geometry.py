"""The shape of REQUEST_FILTER = "bloom"'s layers: how many 512-bit blocks each has, how many bits of a block a
fingerprint sets (k) and how many fingerprints it takes before the next layer is made.

The filter is blocked: a fingerprint's k bits all lie in one block of 64 bytes, so that bloom_first_seen.lua
reads and writes them with one GETRANGE and one SETRANGE, where a classic Bloom filter's k bits, spread over
the whole bitmap, cost k SETBITs (Redis's time a request: 6 µs against 15 µs). A blocked filter needs more bits
for the same error rate, because blocks fill unevenly: its rate is the mean, over the number of fingerprints a
block holds (Poisson), of a small Bloom filter's; the sizes below are solved from that rate, not from the
classic formula (Putze, Sanders and Singler, "Cache-, hash- and space-efficient Bloom filters", 2007).

Layer i holds capacity x 2^i fingerprints. The error rate is shared out so that every layer's adds up to less
than REQUEST_FILTER_ERROR_RATE however many there are: layer 0 takes three quarters of it (most batches never
pass their capacity, and a filter at its capacity is then at its leanest: 2.0 bytes a fingerprint at 0.001),
layer i >= 1 takes 2^-(i+2) of it.
"""
import functools
import math
from typing import NamedTuple

BLOCK_BITS = 512
LAYOUT = "blocked512"       # kept in the filter's HASH: a filter is only ever read with the layout it was made in
MAX_BITS = 2 ** 32          # SETRANGE's offsets stop at 512 MB: a layer that large holds fewer fingerprints


class Layer(NamedTuple):
    blocks: int
    k: int
    holds: int


def layer_error_rate(error_rate: float, layer: int) -> float:
    return error_rate * (3 / 4 if layer == 0 else 2.0 ** -(layer + 2))


def blocked_error_rate(bits_each: float, k: int) -> float:
    """The false-positive rate of a blocked filter at `bits_each` bits a fingerprint with k distinct bits each
    in one block: over i, the number of fingerprints in the block (Poisson, mean BLOCK_BITS / bits_each), the
    chance that k bits are set when each of i fingerprints set k of the block's bits."""
    mean = BLOCK_BITS / bits_each
    rate, weight, held = 0.0, math.exp(-mean), 0
    while held <= mean or weight > 1e-15:
        rate += weight * (1 - (1 - k / BLOCK_BITS) ** held) ** k
        held += 1
        weight *= mean / held
    return rate


def bits_each_for(rate: float, k: int) -> float:
    """The fewest bits a fingerprint at which a blocked filter of k bits stays at or under `rate`."""
    low, high = 1.0, 4 * -math.log(rate) / math.log(2) ** 2 + 8
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if blocked_error_rate(middle, k) > rate else (low, middle)
    return high


@functools.lru_cache(maxsize=256)
def layer_shape(capacity: int, error_rate: float, layer: int) -> Layer:
    """Layer `layer`'s blocks, k and capacity, the k that needs the fewest bits."""
    rate = layer_error_rate(error_rate, layer)
    classic_k = max(1, round(-math.log2(rate)))
    bits_each, k = min((bits_each_for(rate, k), k) for k in range(max(1, classic_k // 2), classic_k + 2))
    holds = capacity * 2 ** layer
    blocks = math.ceil(holds * bits_each / BLOCK_BITS)
    if blocks * BLOCK_BITS > MAX_BITS:
        blocks = MAX_BITS // BLOCK_BITS
        holds = math.floor(MAX_BITS / bits_each)
    return Layer(blocks, k, holds)


def first_layer_bytes(capacity: int, error_rate: float) -> int:
    """The bitmap of a filter's first layer, in bytes (before Redis's allocator rounds it)."""
    return layer_shape(capacity, error_rate, 0).blocks * BLOCK_BITS // 8
