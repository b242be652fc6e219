"""Reading back the quality JSON a closed batch's record keeps (quality/verdict.py writes it): whole for
`batchd quality`, or a part at a time. A batch of 10,000 hosts keeps some MB of it, which parsed whole takes
several times that: the master folds the baseline's batches host by host (`kept_measures`), and `batchd status`
reads the flags alone (`kept_flags`).
"""
import json
import re
from typing import Iterator, Optional

from .measures import HostMeasures


def kept_quality(quality: Optional[str]) -> Optional[dict]:
    """A closed batch's quality JSON, whole (BatchStore.batch_quality: None when judged by no batchd, or with
    QUALITY_CHECKS off)."""
    if not quality:
        return None
    kept = json.loads(quality)
    return kept if isinstance(kept, dict) else None


def kept_measures(quality: str) -> Iterator[tuple]:
    """(host, HostMeasures) of a closed batch, from the JSON its record keeps, one host at a time: a batch of
    10,000 hosts keeps some MB of text, which parsed whole would take several times that."""
    reader = _JsonReader(quality)
    for key in reader.members():
        if key == "hosts":
            for host in reader.members():
                yield host, HostMeasures.from_json(reader.value())
        else:
            reader.skip()


def kept_flags(quality: Optional[str]) -> Optional[list]:
    """The flags of a closed batch's quality JSON (None: it keeps none), read without its hosts (`batchd
    status`)."""
    if not quality:
        return None
    reader = _JsonReader(quality)
    for key in reader.members():
        if key == "flags":
            return reader.value()
        reader.skip()
    return []


class _JsonReader:
    """Reads a JSON text an object's member at a time."""

    DECODER = json.JSONDecoder()
    BLANKS = re.compile(r"[ \t\n\r]*")

    def __init__(self, text: str):
        self.text, self.at = text, 0

    def members(self) -> Iterator[str]:
        """The keys of the object here, the reader left at each one's value, which the caller reads (value(),
        or members() of an object) before it asks for the next key."""
        self._expect("{")
        if self.next_is("}"):
            self.at += 1
            return
        while True:
            key = self.value()
            self._expect(":")
            yield key
            if self.next_is("}"):
                self.at += 1
                return
            self._expect(",")

    def value(self):
        self.next_is("")
        found, self.at = self.DECODER.raw_decode(self.text, self.at)
        return found

    def skip(self) -> None:
        """Go past the value here; an object member by member, so that the hosts are never all read at once."""
        if self.next_is("{"):
            for _ in self.members():
                self.skip()
        else:
            self.value()

    def next_is(self, char: str) -> bool:
        """Whether the next character past blanks is `char` (the reader is left on it)."""
        self.at = self.BLANKS.match(self.text, self.at).end()   # type: ignore[union-attr]
        return self.text.startswith(char, self.at)

    def _expect(self, char: str) -> None:
        if not self.next_is(char):
            raise ValueError(f"a batch record's quality JSON: {char!r} expected at character {self.at}")
        self.at += 1
