"""Fact generation for the needle set: seeded templates with made-up places, equipment and codes.

Split from `needles` (which places the facts) so the template vocabulary can grow without crowding
the planting logic. Every fact a `FactMaker` draws is unique across the set it builds, and neither
its subject nor its value occurs in the text the caller forbids.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass

from eval_assets.gold.gold_set import normalise

__all__ = ["Fact", "FactMaker"]

_PLACES = (
    "Bergen", "Tilburg", "Aarhus", "Ghent", "Linz", "Tampere", "Uppsala", "Brno", "Leiden", "Porto",
    "Kassel", "Malmo", "Zwolle", "Graz", "Odense", "Bremen", "Lorient", "Trondheim", "Turku",
    "Antwerp", "Salzburg", "Breda", "Esbjerg", "Kiel", "Lugano", "Namur", "Oulu", "Stavern", "Delft",
    "Haarlem", "Bodo", "Vaasa", "Ystad", "Arnhem", "Ravenna", "Gdynia", "Cork", "Galway", "Bilbao",
)
_EQUIPMENT = (
    "relay cabinet", "pump station", "backup generator", "chiller unit", "loading crane",
    "switchgear panel", "fire pump", "compressor skid", "transfer switch", "boiler room",
    "ventilation plant", "signal box", "battery bank", "dock leveller", "cold room",
    "water softener", "fuel tank", "server rack", "intake valve", "conveyor line",
)
_ROOMS = (
    "archive room", "plant room", "records vault", "comms room", "tool store", "meter cupboard",
    "sample store", "key safe", "parts cage", "roof hatch",
)
_TEAMS = (
    "night shift", "weekend rota", "harbour patrol", "calibration crew", "audit team",
    "inventory team", "winter crew", "depot crew", "safety watch", "dispatch desk",
)
_FIRST = (
    "Anneke", "Bram", "Carys", "Dagny", "Emeric", "Femke", "Gunnar", "Hedda", "Ilse", "Jorrit",
    "Kaja", "Lieven", "Maren", "Niels", "Oona", "Pieter", "Rosalie", "Sindre", "Tessel", "Ulrik",
)
_LAST = (
    "Vrolijk", "Brekke", "Dalsgaard", "Oosterhuis", "Lindqvist", "Haugland", "Verbeek", "Solberg",
    "Kuipers", "Nyberg", "Rasmussen", "Wijnands", "Tveit", "Engstrom", "Mulder", "Aasen",
)
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)
# Letters that rarely start real identifiers, so a generated code is unlikely to exist already.
_CODE_LETTERS = "QXZJKVWY"


def _code(rng: random.Random) -> str:
    return f"{rng.choice(_CODE_LETTERS)}{rng.choice(_CODE_LETTERS)}-{rng.randint(1000, 9999)}"


def _bin(rng: random.Random) -> str:
    return f"{rng.choice('ABCDEFGH')}{rng.randint(10, 99)}-{rng.randint(100, 999)}"


def _callsign(rng: random.Random) -> str:
    letters = "".join(rng.choice(string.ascii_uppercase) for _ in range(2))
    return f"{letters}{rng.randint(2, 9)}{rng.choice(_CODE_LETTERS)}{rng.choice(_CODE_LETTERS)}"


def _pin(rng: random.Random) -> str:
    return f"{rng.randint(0, 999_999):06d}"


def _date(rng: random.Random) -> str:
    return f"{rng.randint(2, 27)} {rng.choice(_MONTHS)} {rng.randint(2026, 2031)}"


def _person(rng: random.Random) -> str:
    return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"


@dataclass(frozen=True)
class _Template:
    kind: str
    subject: tuple[tuple[str, ...], ...]  # word lists the subject is drawn from, in order
    sentence: str  # "{subject}" and "{value}"
    query: str
    value: Callable[[random.Random], str]


_TEMPLATES = (
    _Template("maintenance", (_PLACES, _EQUIPMENT), "The maintenance code for the {subject} is {value}.",
              "What is the maintenance code for the {subject}?", _code),
    _Template("asset", (_PLACES, _EQUIPMENT), "The asset tag fixed to the {subject} reads {value}.",
              "What does the asset tag on the {subject} read?", _code),
    _Template("spares", (_PLACES, _EQUIPMENT), "Spare parts for the {subject} are kept in bin {value}.",
              "In which bin are spare parts for the {subject} kept?", _bin),
    _Template("inspection", (_PLACES, _EQUIPMENT), "The next safety inspection of the {subject} is booked for {value}.",
              "When is the next safety inspection of the {subject} booked?", _date),
    _Template("keypad", (_PLACES, _ROOMS), "The keypad code for the {subject} is {value}.",
              "What is the keypad code for the {subject}?", _pin),
    _Template("lead", (_PLACES, _TEAMS), "The {subject} is led by {value}.",
              "Who leads the {subject}?", _person),
    _Template("radio", (_PLACES, _TEAMS), "The radio call sign of the {subject} is {value}.",
              "What is the radio call sign of the {subject}?", _callsign),
)


@dataclass(frozen=True)
class Fact:
    sentence: str
    query: str
    value: str


class FactMaker:
    """Draws facts whose subject, query, value and sentence are unique across the whole set."""

    def __init__(self) -> None:
        self.subjects: set[tuple[str, str]] = set()
        self.values: set[str] = set()

    def make(self, rng: random.Random, forbidden_text: str) -> Fact:
        for _ in range(10_000):
            template = rng.choice(_TEMPLATES)
            subject = " ".join(rng.choice(words) for words in template.subject)
            value = template.value(rng)
            key = (template.kind, subject)
            if key in self.subjects or value in self.values:
                continue
            sentence = template.sentence.format(subject=subject, value=value)
            if normalise(value) in forbidden_text or normalise(subject) in forbidden_text:
                continue
            self.subjects.add(key)
            self.values.add(value)
            return Fact(sentence=sentence, query=template.query.format(subject=subject), value=value)
        raise RuntimeError("could not draw a unique fact; the template space is exhausted")
